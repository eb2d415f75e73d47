/* The algorithms' names, from their table. Apart from coll/algo.c so that
 * what prints names (the flight recorder, the frame checks) needs none of
 * the algorithms themselves. */
#include "coll/algo_table.h"
#include "core/names.h"

static const char *const algo_names[WEFT_ALGO_COUNT] = {
    [WEFT_ALGO_AUTO] = "auto",
#define NAME(id, name, alias, build, run, price, free, flags, kinds) [WEFT_ALGO_##id] = name,
    COLL_ALGOS(NAME)
#undef NAME
};

static const names_alias algo_aliases[] = {
#define ALIAS(id, name, alias, build, run, price, free, flags, kinds) { alias, WEFT_ALGO_##id },
    COLL_ALGOS(ALIAS)
#undef ALIAS
};

const char *weft_algo_name(weft_algo a)
{
    return (unsigned)a < WEFT_ALGO_COUNT ? algo_names[a] : NULL;
}

int weft_algo_parse(const char *s, weft_algo *out)
{
    int v, rc = names_parse(s, algo_names, WEFT_ALGO_COUNT, algo_aliases,
                            sizeof algo_aliases / sizeof *algo_aliases, &v);
    if (rc == 0 && out)
        *out = (weft_algo)v;
    return out ? rc : WEFT_EINVAL;
}
