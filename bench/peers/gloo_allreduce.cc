// gloo_allreduce: Gloo's ring all-reduce (f32 sum) over its TCP transport on
// loopback, timed the way weft-bench times weft_allreduce so the rows can be
// compared line by line.
//
//   RANK=r SIZE=n GLOO_STORE=/tmp/dir ./gloo_allreduce -b 8 -e 64M -f 4 -w 5 -n 20
//
// Start SIZE processes with RANK 0..SIZE-1 and the same GLOO_STORE, an empty
// directory that serves as Gloo's FileStore for the rendezvous. Per size:
// out-of-place, then in-place (output buffer only); each is warm-up calls, a
// barrier, the timed calls, and the mean time per call taken as the maximum
// over ranks. Inputs are small integers, so the sum is exact in any order.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

namespace {

uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (uint64_t)v;
}

// The size sequence of weft-bench -b/-e/-f.
uint64_t next_size(uint64_t size, double factor)
{
    uint64_t next = (uint64_t)((double)size * factor);
    return next == size ? next + 1 : next;
}

// The same inputs weft-bench uses for sum.
float value(int r, uint64_t i)
{
    return (float)(((uint64_t)r * 3 + i * 7) % 5);
}

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

struct job {
    std::shared_ptr<gloo::Context> ctx;
    uint32_t tag = 1;

    void barrier()
    {
        gloo::BarrierOptions o(ctx);
        o.setTag(tag++);
        gloo::barrier(o);
    }

    template <typename T>
    T reduce_scalar(T x, void (*fn)(void *, const void *, const void *, size_t))
    {
        gloo::AllreduceOptions o(ctx);
        o.setOutput(&x, 1);
        o.setReduceFunction(fn);
        o.setTag(tag++);
        gloo::allreduce(o);
        return x;
    }
};

void fill(std::vector<float> &in, std::vector<float> &out, size_t count, int r)
{
    for (size_t i = 0; i < count; i++)
        in[i] = value(r, i);
    memset(out.data(), 0xa5, count * sizeof(float));
}

// One mode of one size: the slowest rank's mean seconds per call.
double measure(job &j, std::vector<float> &in, std::vector<float> &out, size_t count,
               int warmup, int iters, bool inplace, bool check, long long *wrong)
{
    int r = j.ctx->rank, n = j.ctx->size;
    gloo::AllreduceOptions o(j.ctx);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    if (!inplace)
        o.setInput(in.data(), count);
    o.setOutput(out.data(), count);
    o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(
        &gloo::sum<float>));
    o.setTag(j.tag++);
    fill(in, out, count, r);
    if (inplace)
        memcpy(out.data(), in.data(), count * sizeof(float));
    for (int i = 0; i < warmup; i++)
        gloo::allreduce(o);
    j.barrier();
    double t0 = now();
    for (int i = 0; i < iters; i++)
        gloo::allreduce(o);
    double dt = (now() - t0) / iters;
    double slowest = j.reduce_scalar<double>(dt, &gloo::max<double>);
    long long bad = 0;
    if (check) {
        fill(in, out, count, r);
        if (inplace)
            memcpy(out.data(), in.data(), count * sizeof(float));
        gloo::allreduce(o);
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int k = 0; k < n; k++)
                want += value(k, i);
            bad += out[i] != want;
        }
    }
    bad = j.reduce_scalar<long long>(bad, &gloo::sum<long long>);
    *wrong = check ? bad : -1;
    return slowest;
}

void usage()
{
    fprintf(stderr, "usage: RANK=r SIZE=n GLOO_STORE=DIR gloo_allreduce [-b BYTES] [-e BYTES]"
                    " [-f X] [-w N] [-n N] [-c 0|1]\n"
                    "  the options and defaults of weft-bench allreduce (f32 sum only)\n");
}

} // namespace

int main(int argc, char **argv)
{
    uint64_t minb = 8, maxb = 32u << 20;
    double factor = 2;
    int warmup = 5, iters = 20, check = 1, ch;
    while ((ch = getopt(argc, argv, "b:e:f:w:n:c:h")) != -1) {
        switch (ch) {
        case 'b': minb = parse_size(optarg); break;
        case 'e': maxb = parse_size(optarg); break;
        case 'f': factor = atof(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'c': check = atoi(optarg); break;
        default: usage(); return 2;
        }
    }
    const char *rs = getenv("RANK"), *ns = getenv("SIZE"), *dir = getenv("GLOO_STORE");
    if (!rs || !ns || !dir || iters < 1 || factor <= 1 || minb > maxb) {
        usage();
        return 2;
    }
    int r = atoi(rs), n = atoi(ns);
    try {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(dir);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(r, n);
        // Oversubscribed cores make a large call slow; do not let Gloo's
        // default 30 s timeout end the run.
        ctx->setTimeout(std::chrono::seconds(600));
        ctx->connectFullMesh(store, dev);
        job j;
        j.ctx = ctx;
        std::vector<float> in(maxb / sizeof(float) + 16), out(maxb / sizeof(float) + 16);
        if (r == 0) {
            printf("# gloo_allreduce: %d ranks, gloo ring over tcp 127.0.0.1, warm-up %d, "
                   "iterations %d\n#\n", n, warmup, iters);
            printf("# %10s %12s %8s %6s %6s %32s %32s\n", "", "", "", "", "", "out-of-place",
                   "in-place");
            printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count",
                   "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                   "busbw", "#wrong");
            printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)",
                   "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                   "(GB/s)", "");
        }
        long long wrong_total = 0;
        for (uint64_t size = minb; size <= maxb; size = next_size(size, factor)) {
            size_t count = size / sizeof(float);
            double t[2], algbw[2], busbw[2];
            long long wrong[2];
            for (int inplace = 0; inplace < 2; inplace++) {
                t[inplace] = measure(j, in, out, count, warmup, iters, inplace, check,
                                     &wrong[inplace]);
                algbw[inplace] = t[inplace] > 0 ? (double)count * sizeof(float) / t[inplace] / 1e9
                                                : 0;
                busbw[inplace] = algbw[inplace] * 2.0 * (n - 1) / n;
                wrong_total += wrong[inplace] > 0 ? wrong[inplace] : 0;
            }
            if (r == 0) {
                printf("  %10llu %12llu %8s %6s %6d %9.2f %7.3f %7.3f %6lld %9.2f %7.3f %7.3f "
                       "%6lld\n",
                       (unsigned long long)(count * sizeof(float)), (unsigned long long)count,
                       "float", "sum", -1, t[0] * 1e6, algbw[0], busbw[0], wrong[0], t[1] * 1e6,
                       algbw[1], busbw[1], wrong[1]);
                fflush(stdout);
            }
        }
        if (r == 0)
            printf("# Out of bounds values : %lld %s\n", wrong_total,
                   wrong_total ? "FAILED" : "OK");
        return wrong_total ? 1 : 0;
    } catch (const std::exception &e) {
        fprintf(stderr, "gloo_allreduce: rank %d: %s\n", r, e.what());
        return 1;
    }
}
