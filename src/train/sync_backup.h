/* Backup workers (sync mode backup:b), the part of weft_sync that keeps
 * its own connections: see sync_backup.c. */
#ifndef WEFT_TRAIN_SYNC_BACKUP_H
#define WEFT_TRAIN_SYNC_BACKUP_H

#include "weft.h"

typedef struct backup backup;

int train_backup_create(backup **out, weft_comm *c, weft_model *m, int b);
void train_backup_destroy(backup *k);
int train_backup_begin(backup *k, int *skip);
int train_backup_grads(backup *k, int n, const float in[2], float out[3]);
int train_backup_finish(backup *k);
uint64_t train_backup_included(const backup *k);
uint64_t train_backup_bytes(const backup *k);

#endif
