/* Closed-form costs, one host: the formulas of docs/ALGORITHMS.md with the
 * cost model's constants. */
#include "coll/tune/cost.h"

static double ceil_div(double a, double b) { return a <= 0 ? 0 : (double)(uint64_t)((a + b - 1) / b); }

static int log2_floor(int p)
{
    int l = 0;
    while ((2 << l) <= p)
        l++;
    return l;
}

/* Binary tree depth over p positions (as sched_tree's in-order tree). */
static int depth(int p) { return log2_floor(p) + ((p & (p - 1)) != 0); }

double cost_closed(const cost_params *c, weft_algo a, weft_coll_kind k, uint64_t bytes,
                   int p)
{
    int over = c->cores > 0 && p > c->cores;
    double al = over ? c->alpha_over : c->alpha, m = over ? c->msg_over : c->msg;
    double be = c->beta, ga = c->gamma, n = (double)bytes, C = (double)SCHED_DEFAULT_CHUNK;
    int L = log2_floor(p), pw = 1 << L, fold = p != pw, D = depth(p);
    double q = p - 1, path = -1, work = 0; /* work: a rank's β and γ terms */
    if (p < 2)
        return 0;
    switch (a) {
    case WEFT_ALGO_NAIVE:
        switch (k) {
        case WEFT_COLL_ALLREDUCE: case WEFT_COLL_REDUCE_SCATTER:
            work = q * n * (be + ga);
            path = (k == WEFT_COLL_ALLREDUCE ? ceil_div(n, C) : 1) * (al + (p - 2) * m) + work;
            break;
        case WEFT_COLL_REDUCE:
            work = q * n * (be + ga);
            path = ceil_div(n, C) * (al + (p - 2) * m) + work;
            break;
        case WEFT_COLL_BARRIER:
            path = al + (p - 2) * m;
            break;
        default: /* broadcast, gather, scatter, allgather, alltoall */
            work = q * n * be;
            path = al + (p - 2) * m + work;
            break;
        }
        break;
    case WEFT_ALGO_RING:
        switch (k) {
        case WEFT_COLL_ALLREDUCE:
            work = 2 * q * n / p * be + q * n / p * ga;
            path = 2 * q * al + work;
            break;
        case WEFT_COLL_BROADCAST: case WEFT_COLL_REDUCE: {
            double ch = n < C ? n : C, r = p - 2 + ceil_div(n, C);
            work = n * be + (k == WEFT_COLL_REDUCE ? n * ga : 0);
            path = r * (al + ch * (be + (k == WEFT_COLL_REDUCE ? ga : 0)));
            break;
        }
        case WEFT_COLL_BARRIER:
            path = (L + fold) * al;
            break;
        default:
            work = q * n * (be + (k == WEFT_COLL_REDUCE_SCATTER ? ga : 0));
            path = q * al + work;
            break;
        }
        break;
    case WEFT_ALGO_TREE: {
        double ch = n / 2 < C ? n / 2 : C;
        if (k == WEFT_COLL_ALLREDUCE) {
            work = 2 * n * be + n * ga;
            path = (ceil_div(n / 2, C) + 2 * D) * (al + m) + 2 * n * be + n * ga;
            if (path < (ceil_div(n / 2, C) + 2 * D) * (al + m) + 2 * ch * 2 * be)
                path = (ceil_div(n / 2, C) + 2 * D) * (al + m) + 2 * ch * 2 * be;
        } else if (k == WEFT_COLL_BROADCAST || k == WEFT_COLL_REDUCE) {
            ch = n < C ? n : C;
            work = 2 * n * be + (k == WEFT_COLL_REDUCE ? 2 * n * ga : 0);
            path = (ceil_div(n, C) + D) * (al + m + 2 * ch * be) +
                   (k == WEFT_COLL_REDUCE ? 2 * n * ga : 0);
        }
        break;
    }
    case WEFT_ALGO_RD:
        if (k == WEFT_COLL_ALLREDUCE) {
            work = (L + fold) * n * (be + ga);
            path = (L + 2 * fold) * al + work;
        }
        break;
    case WEFT_ALGO_RABENSEIFNER: {
        double f = (double)(pw - 1) / pw;
        switch (k) {
        case WEFT_COLL_ALLREDUCE:
            work = 2 * f * n * be + f * n * ga + fold * n * (be + ga);
            path = (2 * L + 2 * fold) * al + work;
            break;
        case WEFT_COLL_REDUCE_SCATTER:
            work = q * n * (be + ga) + fold * p * n * (be + ga);
            path = (L + 2 * fold) * al + work;
            break;
        case WEFT_COLL_ALLGATHER:
            work = q * n * be + fold * p * n * be;
            path = (L + 2 * fold) * al + work;
            break;
        case WEFT_COLL_REDUCE: case WEFT_COLL_BROADCAST:
            work = 2 * f * n * be + (k == WEFT_COLL_REDUCE ? f * n * ga : 0) + fold * n * be;
            path = (2 * L + 2 * fold) * al + work;
            break;
        default:
            break;
        }
        break;
    }
    default:
        break;
    }
    if (path < 0)
        return -1;
    double t = path;
    if (over && work * p / c->cores > t)
        t = work * p / c->cores;
    return t + 1e-3 * path;
}
