/* Subcommands not built yet: each says so rather than doing nothing. */
#include "weft.h"

#include <stdio.h>

static int todo(const char *name)
{
    fprintf(stderr, "weft-cpn %s: not available in this build\n", name);
    return WEFT_ENOTSUP;
}

int weft_cpn_plan_main(int argc, char **argv)
{
    return todo("plan");
}
