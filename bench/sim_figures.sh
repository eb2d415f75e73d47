#!/bin/sh
# Recomputes the data and plots of docs/SIMULATION.md:
#   docs/sim/summit.dat  docs/sim/summit.png   (NCCL on Summit, 96..24,576 GPUs)
#   docs/sim/gpt3.txt    docs/sim/gpt3.png     (GPT-3 gradients, 3D-parallel case)
#   docs/sim/summit-cli.txt                    (the CLI's view of the 24,576-GPU point)
# Needs: make, a C compiler; for the plots /usr/bin/python3 with matplotlib
# (Debian: apt-get install -y python3-matplotlib).
# usage: bench/sim_figures.sh [BUILD_DIR]
set -e
cd "$(dirname "$0")/.."
B=${1:-build}
make -s BUILD="$B" "$B/weft-sim"
mkdir -p docs/sim
"$B/weft-sim" figure summit > docs/sim/summit.dat
"$B/weft-sim" figure gpt3 > docs/sim/gpt3.txt
"$B/weft-sim" allreduce --topo summit --ranks 24576 --algo ring,tree,rd --size 8 --size 64M \
    > docs/sim/summit-cli.txt
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    /usr/bin/python3 tools/sim_plot.py docs/sim
else
    echo "sim_figures: no matplotlib; data written, plots skipped" >&2
fi
cat docs/sim/summit.dat docs/sim/gpt3.txt
