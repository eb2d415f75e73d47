/* weft_comm_init_env: a rank started by a launcher finds its job in the
 * environment, and a replacement in an elastic job joins it instead. */
#include "weft.h"

#include "core/param.h"

#include <stdlib.h>

int weft_comm_init_env(weft_comm **out)
{
    weft_config cfg;
    int rc;
    if (!out)
        return WEFT_EINVAL;
    *out = NULL;
    weft_config_default(&cfg);
    if ((rc = weft_config_from_env(&cfg)))
        return rc;
    if (param_env(PARAM_join) && atoi(param_env(PARAM_join)) == 1)
        return weft_comm_join(&cfg, out); /* a replacement in an elastic job */
    return weft_comm_init(out, &cfg);
}
