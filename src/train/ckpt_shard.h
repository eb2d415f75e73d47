/* Sharded checkpoints: a directory in which every rank wrote what it
 * owns to its own file, and a manifest (a weft_ckpt file) that says
 * where each slice of each whole vector lies. Layout of DIR:
 *
 *   latest                 the name of the newest complete save, one line
 *   step-NNNNNNNN-K/       one save (K tells saves of one step apart)
 *     rank-RRRRR.bin       raw little-endian f32 runs, in slice order
 *     manifest             the run's records as the one-file checkpoint
 *                          has them (train/args, model/config, optim/config,
 *                          optim/steps, rng, data/...), none of the tensors,
 *                          and the shard/ records below
 *
 * shard/ records: "shard/format" ("weft-shards 1"), "shard/layout"
 * ("world=W tp=T pp=P dp=D zero=Z sync=S compress=C", then " ep=E" where
 * the experts were divided), "shard/vectors" (the vector
 * names, one a line: "param", then the optimiser states), "shard/files"
 * (file names, one a line), "shard/file_info" (i64 [files, 2]: bytes,
 * CRC-32) and "shard/slices" (i64 [n, 7]: the fields of ckpt_slice; the
 * whole tensors' names and shapes follow from model/config). A save is complete once its manifest exists: it is renamed
 * into place after every rank's file is written and synced. */
#ifndef WEFT_TRAIN_CKPT_SHARD_H
#define WEFT_TRAIN_CKPT_SHARD_H
#include "weft.h"

#include <stddef.h>
#include <stdint.h>

/* count runs of len elements of vector vec: run k is whole elements
 * [start + k * stride, + len) and lies in file at byte off + k * len * 4
 * (the runs are consecutive in the file). A column split of a matrix is
 * one slice, not one per row. crc: of the slice's count * len * 4 bytes,
 * so a reader that needs part of a file can check what it reads. */
typedef struct {
    uint64_t file, vec, start, len, stride, count, off, crc;
} ckpt_slice;
enum { CKPT_SLICE_FIELDS = 8, CKPT_SLICE_FIELDS_V1 = 7 };
/* The bytes of one slice at most (ckpt_slices_add starts another): what a
 * reader checks beyond what it needs is at most that per slice it meets. */
enum { CKPT_SLICE_MAX_BYTES = 64 << 10 };

typedef struct {
    ckpt_slice *s;
    size_t n, cap;
} ckpt_slices;

/* Appends a run (vector vec, whole elements [at, at + len), at file byte
 * off): it extends the last slice where it continues that one's pattern. */
int ckpt_slices_add(ckpt_slices *l, uint64_t file, uint64_t vec, uint64_t at, uint64_t len,
                    uint64_t off);
void ckpt_slices_free(ckpt_slices *l);

/* What is consecutive both in the whole vector and in the file. */
typedef int (*ckpt_overlap_fn)(void *arg, uint64_t at, uint64_t off, uint64_t len);
/* fn for each run of slice s inside whole elements [lo, hi), cut to it,
 * in file order; a nonzero return stops and is returned. */
int ckpt_slice_overlap(const ckpt_slice *s, uint64_t lo, uint64_t hi, ckpt_overlap_fn fn,
                       void *arg);

/* What a rank owns of one vector (0: the parameters, j: optimiser state
 * j - 1) of its model part: elements [lo, lo + n), src[0] being lo. */
typedef struct {
    int vec;
    size_t lo, n;
    const float *src;
} ckpt_piece;

/* Writes the pieces of part m (tensors with skip[i] set left out: another
 * rank's file has them) to fd as whole-vector runs through a buffer of
 * buf_bytes, recording each run as file index file in *out; *bytes and
 * *crc: the file's. */
int ckpt_shard_write(int fd, const weft_model *m, const ckpt_piece *p, int np,
                     const unsigned char *skip, uint64_t file, size_t buf_bytes,
                     ckpt_slices *out, uint64_t *bytes, uint32_t *crc);

/* This rank's pieces of z's state (parameters, then each optimiser
 * state; malloc'ed, pointing into z's buffers), none where it owns
 * nothing. With the experts divided (--ep) the expert tensors are in the
 * pieces of the first of their replicas only, whole (ZeRO 0-1), or in
 * each replica's pieces its shard of them (ZeRO 2-3). */
int ckpt_shard_zero_pieces(weft_zero *z, ckpt_piece **out, int *np);

/* Line k of a manifest's text (lines end in \n or the end) into buf; 0 if
 * it is there. */
int ckpt_shard_line(const char *text, int k, char *buf, size_t cap);

/* The directory's save to read: dir itself when it holds a manifest, else
 * the one its latest names; into buf. */
int ckpt_shard_resolve(const char *dir, char *buf, size_t cap);

/* A sharded checkpoint (dir, as ckpt_shard_resolve takes it) as the
 * one-file layout, in memory: every whole tensor and optimiser vector
 * assembled from the files, each file's CRC checked. */
int ckpt_shard_load_whole(const char *dir, weft_ckpt **out);

/* ---- reading what a rank needs (train/ckpt_shard_read.c) ------------- */

/* The manifest of dir's save alone (no tensors), with records of the
 * reading added: "shard/dir" (the save's directory), "shard/bytes_read"
 * (u64, what the readers below have read from its files so far),
 * "shard/bytes_need" (u64, this rank's share of what it holds: parameters
 * that a group holds alike count 1/|group| on each of its ranks) and
 * "shard/phase_s" (f64 [CKPT_PHASES], the load's time by phase),
 * "shard/own_params" (u64, ckpt_shard_own_params_set), "shard/t0" (f64,
 * clock_now() as the manifest was opened), "shard/cpu0" (f64, the
 * process's CPU seconds then) and "shard/sys0" (f64, those in the kernel). */
int ckpt_shard_open_records(const char *dir, weft_ckpt **out);
/* A rank's load by phase, in seconds: the manifest read and checked
 * (CKPT_PH_OPEN), the model and optimiser made (INIT), the preads (READ),
 * the CRCs (CRC), the group's collectives (GATHER); LOAD: the whole, the
 * wall time from the manifest's opening to the training state in place
 * (its user sets it, from ckpt_shard_since_open), so whatever the run does
 * between the phases above (its waits for other ranks included) counts. */
enum { CKPT_PH_OPEN, CKPT_PH_INIT, CKPT_PH_READ, CKPT_PH_CRC, CKPT_PH_GATHER, CKPT_PH_LOAD,
       CKPT_PHASES };
/* Adds s seconds to phase ph of lazy manifest c (nothing elsewhere). */
void ckpt_shard_phase(const weft_ckpt *c, int ph, double s);
/* The phases so far into s; 0 when c is a lazy manifest. */
int ckpt_shard_phases(const weft_ckpt *c, double s[CKPT_PHASES]);
/* Seconds since c was opened by ckpt_shard_open_records (0 elsewhere). */
double ckpt_shard_since_open(const weft_ckpt *c);
/* The process's CPU seconds (all its threads) since then, likewise. */
double ckpt_shard_cpu_since_open(const weft_ckpt *c);
/* Of those, the seconds in the kernel (page faults above all). */
double ckpt_shard_sys_since_open(const weft_ckpt *c);
/* Adds bytes to c's "shard/bytes_need". */
void ckpt_shard_need(const weft_ckpt *c, uint64_t bytes);
/* 1 when c is such a manifest: its tensors are read from the files. */
int ckpt_shard_lazy(const weft_ckpt *c);
/* The whole elements [lo, lo + n) of vector vec ("param" or an optimiser
 * state's name) that no slice of the manifest holds: 0 when none, else
 * *first is the first missing one. */
int ckpt_shard_missing(const weft_ckpt *c, const char *vec, uint64_t lo, uint64_t n,
                       uint64_t *first);
/* The end of the parameters' furthest slice: the whole vector's length
 * when the save is whole. */
uint64_t ckpt_shard_extent(const weft_ckpt *c);

typedef struct ckpt_shard_reader ckpt_shard_reader;
int ckpt_shard_reader_open(const weft_ckpt *c, ckpt_shard_reader **out);
/* The index of the vector named name, or -1. */
int ckpt_shard_reader_vector(const ckpt_shard_reader *r, const char *name);
/* Whole elements [lo, lo + n) of vector vec into dst, each run one pread;
 * WEFT_EIO unless every element is found once. Each slice read from is
 * first checked whole against its CRC, once, through a bounded buffer. */
int ckpt_shard_read(ckpt_shard_reader *r, int vec, uint64_t lo, uint64_t n, float *dst);
/* What the reads that follow are for ("param/NAME"), named in a failure's
 * account. */
void ckpt_shard_reader_name(ckpt_shard_reader *r, const char *tensor);
/* The account of the first read of c's files that failed (the file's path,
 * the slice, what was wrong, the tensor) into buf: 1 when there is one.
 * Kept in c's "shard/error" record, which ckpt_shard_open_records makes. */
int ckpt_shard_error(const weft_ckpt *c, char *buf, size_t cap);
/* Adds the bytes read to c's "shard/bytes_read"; r may be NULL. */
void ckpt_shard_reader_close(ckpt_shard_reader *r);
/* Asks the kernel to start reading the file bytes of the slices that meet
 * whole elements [lo, lo + n) of vector vec now, so that the reads which
 * follow find them in the page cache while the disk works ahead. */
void ckpt_shard_prefetch(ckpt_shard_reader *r, int vec, uint64_t lo, uint64_t n);
/* Asks the disk for the whole of the save's file name now; nothing when
 * the save has no such file or it cannot be opened (the reads that need
 * it say why). */
void ckpt_shard_prefetch_file(const weft_ckpt *c, const char *name);

/* Long runs of a file read past the page cache (train/ckpt_shard_direct.c).
 * ckpt_direct_able: 1 if file f (at path) opens O_DIRECT. ckpt_direct_ahead
 * queues run [off, off + n) of file f (open as fd) to be read ahead, past
 * the page cache, in the order of the calls: 1 if queued, 0 where it is left
 * to the page cache (short, held there whole already, or no direct reads).
 * ckpt_direct_copy copies up to n bytes of file f from off into dst from
 * what was read ahead, *done of them (a window's end may come first),
 * waiting for them if they are being read: 0; 1 where none of them was
 * read ahead (the page cache then); WEFT_EIO where their read failed. */
typedef struct ckpt_direct ckpt_direct;
int ckpt_direct_open(ckpt_direct **out, size_t nfiles);
void ckpt_direct_close(ckpt_direct *d);
int ckpt_direct_able(ckpt_direct *d, uint64_t f, const char *path);
int ckpt_direct_ahead(ckpt_direct *d, uint64_t f, const char *path, int fd, uint64_t off,
                      uint64_t n);
int ckpt_direct_copy(ckpt_direct *d, uint64_t f, uint64_t off, size_t n, void *dst,
                     size_t *done);
/* The bytes ckpt_direct_copy gave, all together. */
uint64_t ckpt_direct_bytes(const ckpt_direct *d);

/* m's parameters (a whole model, a stage or a tensor part) and an
 * optimiser for its [base, base + n) (m NULL: the whole model's layout),
 * read from the files of lazy manifest c (train/ckpt_shard_model.c). */
int ckpt_shard_get_params(const weft_ckpt *c, weft_model *m);
int ckpt_shard_get_optim_stage(const weft_ckpt *c, const weft_model *m, size_t base, size_t n,
                               weft_optim **out);
/* State vector vec of [base, base + n) of m's buffers (m NULL: the whole
 * model's layout) into dst, tensor by tensor. */
int ckpt_shard_read_state(ckpt_shard_reader *r, int vec, const weft_model *m, size_t base,
                          size_t n, float *dst);
/* The file bytes ckpt_shard_read_state will read, asked of the disk
 * ahead of it. */
void ckpt_shard_prefetch_state(ckpt_shard_reader *r, int vec, const weft_model *m, size_t base,
                               size_t n);
/* Collective over g (NULL: one rank): m's parameters as
 * ckpt_shard_get_params reads them, where every rank of g holds the same
 * part of the model (its replicas): each reads 1/|g| of m's buffer and
 * the group all-gathers it, so the bytes read are the part's once. A
 * failed read fails every rank (the one that failed keeps the account). */
int ckpt_shard_get_params_group(const weft_ckpt *c, weft_model *m, weft_comm *g);

/* ---- a ZeRO resume from each rank's own shard (train/ckpt_shard_zero.c) */

/* A whole model for such a resume: parameters and gradients untouched
 * (garbage until the load and the first step write them). */
int ckpt_shard_zero_model(const weft_model_config *cfg, weft_model **out);
/* The state of lazy manifest c's "shard/own_params": CKPT_OWN_PENDING
 * once marked, so that ckpt_shard_get_optim_stage makes each optimiser
 * range and leaves its reading, with the parameters of its range (those
 * a ZeRO rank of stage 1-3 owns), to ckpt_shard_zero_finish;
 * CKPT_OWN_DONE once that completed them. States only go up. */
enum { CKPT_OWN_NONE, CKPT_OWN_PENDING, CKPT_OWN_DONE };
void ckpt_shard_own_params_set(const weft_ckpt *c, int state);
int ckpt_shard_own_params(const weft_ckpt *c);
/* Collective over z's group, after weft_zero_load_optim(z, c) with c
 * marked: reads this rank's parameters and optimiser state; stages 1-2
 * all-gather the parameters (each bucket's as soon as its part is read,
 * while the states are read), stage 3 keeps only its own (the others
 * zero pages, gathered by the step's passes). A failed read fails every
 * rank; the one that failed keeps the account. */
int ckpt_shard_zero_finish(weft_zero *z, const weft_ckpt *c);

#endif
