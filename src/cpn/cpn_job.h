/* The job intent (docs/CPN.md, "weft-cpn-job/1") read into what the
 * planner prices, and a link matrix (weft-cpn-links/1) read in. */
#ifndef WEFT_CPN_JOB_H
#define WEFT_CPN_JOB_H

#include "cpn/cpn_plan.h"

#include "weft.h"

typedef struct {
    cpn_job_model m;
    weft_model_config model;
    int seq;
    char *text;      /* the intent as given (JSON), copied into the plan */
} cpn_job;

/* err says what is wrong, with the byte offset where it can. */
int cpn_job_parse(const char *text, size_t len, cpn_job *out, char *err, size_t errlen);
void cpn_job_free(cpn_job *j);
/* *links malloc'd. */
int cpn_links_parse(const char *text, size_t len, cpn_link **links, int *n, char *err,
                    size_t errlen);

#endif
