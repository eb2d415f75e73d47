/* The data behind docs/SIMULATION.md: the seeds' two figures, each from
 * one documented calibration. */
#ifndef WEFT_SIM_FIGURES_H
#define WEFT_SIM_FIGURES_H

#include <stdio.h>

/* NCCL on Summit: 8-byte all-reduce latency and 64 MB bus bandwidth of
 * ring and tree from 96 to 24,576 GPUs. Columns documented in the output. */
int sim_figure_summit(FILE *f);
/* GPT-3's gradients: 175e9 fp32 x 128 replicas over 800 Gb/s links, and
 * the 24,576-GPU 3D-parallel case. */
int sim_figure_gpt3(FILE *f);

#endif
