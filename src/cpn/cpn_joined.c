/* The joined parts' file (weft-cpn-joined/1):
 *   {"schema": "weft-cpn-joined/1", "parts": [{"index": 2, "cluster": "c",
 *    "launcher": "local", "hosts": ["h"], "ranks": 1, "batch": 9, "speed": 1}]}
 * each part as a plan's, with its index among the run's parts (its
 * WEFT_CLUSTER and its progress file's number). The shares at the join;
 * the shares now are the re-plan's (progress.shares). */
#include "cpn/cpn_joined.h"

#include "cpn/cpn_cluster.h"
#include "cpn/cpn_json_out.h"

#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void path_of(const char *dir, char *out, size_t cap)
{
    snprintf(out, cap, "%s/joined.json", dir);
}

int cpn_joined_write(const char *dir, const cpn_plan *p)
{
    char path[1200], tmp[1220];
    cpn_jo w;
    int rc = 0;
    cpn_jo_init(&w);
    cpn_jo_obj(&w, NULL);
    cpn_jo_str(&w, "schema", "weft-cpn-joined/1");
    cpn_jo_arr(&w, "parts");
    for (int k = p->nlaunch; k < p->nparts; k++) {
        const cpn_part *pt = &p->parts[k];
        cpn_jo_obj(&w, NULL);
        cpn_jo_int(&w, "index", k);
        cpn_jo_str(&w, "cluster", pt->cluster);
        cpn_jo_str(&w, "launcher", pt->launcher);
        if (pt->slurm_conf[0])
            cpn_jo_str(&w, "slurm_conf", pt->slurm_conf);
        if (pt->host[0]) {
            cpn_jo_arr(&w, "hosts");
            cpn_jo_str(&w, NULL, pt->host);
            cpn_jo_end(&w);
        }
        cpn_jo_int(&w, "ranks", pt->ranks);
        cpn_jo_int(&w, "batch", pt->batch);
        cpn_jo_num(&w, "speed", pt->speed);
        cpn_jo_end(&w);
    }
    cpn_jo_end(&w);
    cpn_jo_end(&w);
    const char *text = cpn_jo_text(&w, &rc);
    if (!text) {
        cpn_jo_free(&w);
        return rc ? rc : WEFT_ENOMEM;
    }
    path_of(dir, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    /* whole or not at all: status may read it while a join writes it */
    if ((rc = cpn_write_file(tmp, text)) == 0 && rename(tmp, path) != 0)
        rc = WEFT_EIO;
    cpn_jo_free(&w);
    return rc;
}

static int parts_of(const json_value *root, cpn_plan *p, char *err, size_t cap)
{
    const json_value *schema = json_get(root, "schema"), *parts = json_get(root, "parts");
    if (root->type != JSON_OBJ || !schema || schema->type != JSON_STR ||
        strcmp(schema->str, "weft-cpn-joined/1") || !parts || parts->type != JSON_ARR) {
        snprintf(err, cap, "not a list of joined parts (weft-cpn-joined/1)");
        return WEFT_ECONFIG;
    }
    for (size_t i = 0; i < parts->n; i++) {
        long long k;
        if (json_int(json_get(&parts->items[i], "index"), 0, 1 << 20, &k) || k != p->nparts ||
            p->nparts >= p->cap) {
            snprintf(err, cap, "parts: the joined part %zu is not the run's part %d", i,
                     p->nparts);
            return WEFT_ECONFIG;
        }
        int rc = cpn_part_read(&parts->items[i], &p->parts[p->nparts], err, cap);
        if (rc)
            return rc;
        p->nparts++;
    }
    return 0;
}

int cpn_joined_read(const char *dir, cpn_plan *p, char *err, size_t cap)
{
    char path[1200], why[256], *text = NULL;
    size_t len = 0;
    json_value *root = NULL;
    path_of(dir, path, sizeof path);
    int rc = cpn_read_file(path, &text, &len);
    if (rc == WEFT_EIO)
        return 0; /* nobody joined */
    if (rc)
        return rc;
    rc = json_parse(text, len, &root, why, sizeof why);
    free(text);
    if (rc == 0)
        rc = parts_of(root, p, why, sizeof why);
    json_free(root);
    if (rc)
        snprintf(err, cap, "%s: %s", path, why);
    return rc;
}
