#!/bin/sh
# Measures the cost model's constants on this machine with weft-tune and
# prints the WEFT_TUNE line to use (docs/TUNING.md). weft-tune runs on
# 2 x cores ranks, which is what alpha_over and msg_over need (more ranks
# than cores); alpha and beta come from two of them, msg (at least 3 cores)
# from cores of them, gamma from the reduction kernel. Each measurement is
# the fastest of REPS batches, since a shared machine only ever adds time.
#
#   sh bench/calibrate.sh [-r REPS] [-t SECONDS] [-o FILE] [-v]
#     -r REPS     batches per measurement (3)
#     -t SECONDS  time budget of the measurements (5)
#     -o FILE     also write the file, for WEFT_TUNE_FILE
#     -v          print the predicted all-reduce table with the constants
# BUILD=dir picks the build directory [build]. WEFT_SHM=0 measures TCP.
set -e
B=${BUILD:-build}
REPS=3 SECS=5 OUTFILE= VERBOSE=
while getopts "r:t:o:vh" opt; do
    case $opt in
    r) REPS=$OPTARG ;; t) SECS=$OPTARG ;; o) OUTFILE=$OPTARG ;; v) VERBOSE=-v ;;
    *) sed -n '2,14p' "$0" >&2; exit 2 ;;
    esac
done
make -s -j2 BUILD="$B" "$B/weftrun" "$B/weft-tune" >/dev/null
P=$((2 * $(nproc)))
echo "calibrate: $P ranks, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exec "$B/weftrun" --no-prefix -n "$P" "$B/weft-tune" -r "$REPS" -t "$SECS" \
    ${OUTFILE:+-o "$OUTFILE"} $VERBOSE
