#!/bin/sh
# Single-thread throughput of the reduction kernel (f32 sum), per CPU second.
#   sh bench/reduce_gbps.sh
set -e
cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc bench/reduce_gbps.c src/coll/reduce.c \
    src/core/half.c -o /tmp/weft-reduce-gbps
/tmp/weft-reduce-gbps
