/* Where per-host measurements are kept (the matmul peak, the matmul
 * choice per model): small text files named STEM-HOST, so that later
 * processes on the host agree without measuring again. */
#ifndef TRAIN_HOST_CACHE_H
#define TRAIN_HOST_CACHE_H

/* The cache files to try, in order, for files named STEM-HOST ("peak",
 * "matmul"): WEFT_PEAK_FILE alone when set (with ".STEM" after it for a
 * stem other than "peak"); else $XDG_CACHE_HOME/weft/STEM-HOST or
 * $HOME/.cache/weft/STEM-HOST, then $TMPDIR (or /tmp)/weft-STEM-UID-HOST.
 * 0 or a bad WEFT_PEAK_FILE's code. */
int host_cache_paths(const char *stem, char paths[2][300], int *n);
/* Makes the folders above path; 0 or -1. */
int host_cache_mkdirs(const char *path);

#endif
