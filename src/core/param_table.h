/* Every WEFT_* variable the library reads, once: its field in param_set,
 * its name, its default (as text, parsed like any value), what it accepts,
 * the other names it is also read under (in order, after its own; the first
 * one set wins), flags and one line of doc. README.md's table of
 * environment variables lists exactly these (tests/test_param.c checks).
 * Adding a variable is one line here and one row there.
 *
 * PARAM_INT (field, name, default, lo, hi, aliases, flags, doc)  lo..hi inclusive
 * PARAM_DBL (field, name, default, lo, hi, aliases, flags, doc)
 * PARAM_STR (field, name, default, check, aliases, flags, doc)   check: NULL or
 *            const char *check(const char *v), NULL when v is acceptable,
 *            else what is
 * PARAM_ENUM(field, name, default, words, aliases, flags, doc)   "a|b|c": the
 *            field holds the index of the word (case-insensitive)
 * PARAM_ALGO(field, name, default, aliases, flags, doc)          a weft_algo name
 *
 * flags: PARAM_SECRET (never printed), PARAM_BYTES (a size as core/size.h
 * reads it: bytes, or K, M, G or T with or without iB, powers of 1024),
 * PARAM_ABOVE (lo excluded).
 * Empty values count as unset, as launchers export empty variables. */

/* where this process is in the job; torchrun's, Open MPI's, PMI's and
 * Slurm's names for the same thing are read as aliases */
PARAM_INT(rank, "WEFT_RANK", "0", 0, 1 << 30,
          "RANK,OMPI_COMM_WORLD_RANK,PMI_RANK,PMIX_RANK,SLURM_PROCID", 0,
          "this process's rank (with WEFT_WORLD_SIZE; neither set: a one-rank job)")
PARAM_INT(world_size, "WEFT_WORLD_SIZE", "1", 1, 1 << 30,
          "WORLD_SIZE,OMPI_COMM_WORLD_SIZE,PMI_SIZE,SLURM_NTASKS", 0,
          "ranks in the job")
PARAM_INT(local_rank, "WEFT_LOCAL_RANK", "-1", -1, 1 << 30,
          "LOCAL_RANK,OMPI_COMM_WORLD_LOCAL_RANK,MPI_LOCALRANKID,SLURM_LOCALID", 0,
          "this process's rank among those on its host; -1: unknown")
PARAM_INT(local_size, "WEFT_LOCAL_SIZE", "0", 0, 1 << 20,
          "LOCAL_WORLD_SIZE,OMPI_COMM_WORLD_LOCAL_SIZE,MPI_LOCALNRANKS", 0,
          "ranks on this host (weftrun sets it); 0: unknown, taken as 1")
PARAM_STR(host_id, "WEFT_HOST_ID", "", NULL, "", 0,
          "this host's identity for grouping ranks; empty: the host name")
PARAM_INT(cluster, "WEFT_CLUSTER", "-1", -1, 1 << 20, "", 0,
          "this rank's cluster; links between clusters are wan-class; -1: one cluster")
PARAM_STR(wan, "WEFT_WAN", "", NULL, "", 0,
          "tests and benchmarks only: emulate wan-class links, delay=50ms,rate=100mbit")
PARAM_INT(wan_streams, "WEFT_WAN_STREAMS", "1", 1, 64, "", 0,
          "TCP streams per wan-class connection, the same on every rank; 1: one")

/* rendezvous */
PARAM_STR(master_addr, "WEFT_MASTER_ADDR", "127.0.0.1", NULL, "MASTER_ADDR", 0,
          "host of the rendezvous store")
PARAM_INT(master_port, "WEFT_MASTER_PORT", "29500", 1, 65535, "MASTER_PORT", 0,
          "port of the rendezvous store")
PARAM_INT(store_external, "WEFT_STORE_EXTERNAL", "0", 0, 1, "", 0,
          "1: rank 0 does not serve the store (run weft-store yourself)")
PARAM_INT(join, "WEFT_JOIN", "0", 0, 1, "", 0,
          "1: weft_comm_init_env joins a running job (weft_comm_join) instead of starting one")
PARAM_DBL(connect_timeout, "WEFT_CONNECT_TIMEOUT", "60", 0, 1e9, "", PARAM_ABOVE,
          "seconds to wait for every rank at rendezvous")

/* connections */
PARAM_STR(socket_ifname, "WEFT_SOCKET_IFNAME", "", NULL, "", 0,
          "interface for data connections; empty: the one that reaches the store")
PARAM_DBL(handshake_timeout, "WEFT_HANDSHAKE_TIMEOUT", "5", 0, 1e9, "", PARAM_ABOVE,
          "seconds an accepted connection may take to say who it is")
PARAM_STR(job_secret, "WEFT_JOB_SECRET", "", NULL, "", PARAM_SECRET,
          "job secret every store and data connection proves (HMAC-SHA256)")
PARAM_INT(tls, "WEFT_TLS", "0", 0, 1, "", 0,
          "1: every store and data connection runs in TLS 1.3, keyed from the job secret")
PARAM_INT(insecure, "WEFT_INSECURE", "0", 0, 1, "", 0,
          "1: allow a multi-host job without authentication (a build without libcrypto)")
PARAM_ENUM(net, "WEFT_NET", "auto", "auto|tcp|ofi", "", 0,
           "network between hosts; auto: libfabric when an RDMA provider is found, else TCP")
PARAM_STR(ofi_provider, "WEFT_OFI_PROVIDER", "", NULL, "FI_PROVIDER", 0,
          "libfabric provider for WEFT_NET=ofi (verbs, efa, cxi, psm3, tcp, shm); empty: any")
PARAM_INT(ofi_rma, "WEFT_OFI_RMA", "1", 0, 1, "", 0,
          "0: large messages over libfabric as tagged chunks even where the provider has RMA writes")
PARAM_INT(shm, "WEFT_SHM", "1", 0, 1, "", 0,
          "0: ranks on one host talk over TCP on loopback instead of shared memory")
PARAM_INT(shm_ring, "WEFT_SHM_RING", "2M", 64 << 10, 1 << 30, "", PARAM_BYTES,
          "bytes of the shared ring per ordered pair of same-host ranks")
PARAM_INT(shm_cma, "WEFT_SHM_CMA", "1", 0, 2, "", 0,
          "single copy (process_vm_readv) from 256 KiB: 0 never, 1 unreduced collectives, 2 all")
PARAM_INT(p2p_shm, "WEFT_P2P_SHM", "1", 0, 1, "", 0,
          "0: point-to-point inside a host over loopback TCP; 1: shared memory (where WEFT_SHM=1)")
PARAM_INT(p2p_share, "WEFT_P2P_SHARE", "1M", 0, 1 << 30, "", PARAM_BYTES,
          "from this size a message between weft_mem_alloc'd buffers of one host is copied by both sides at once; 0: by the receiver alone")

/* collectives */
PARAM_ALGO(algo, "WEFT_ALGO", "auto", "", 0,
           "algorithm of every collective; auto: chosen per call by the cost model")
PARAM_DBL(timeout, "WEFT_TIMEOUT", "300", 0, 1e9, "", PARAM_ABOVE,
          "seconds a collective may wait without progress")
PARAM_DBL(spin_us, "WEFT_SPIN_US", "50", 0, 1e9, "", 0,
          "microseconds a waiting rank polls (yielding) before it sleeps; 0: sleeps at once")
PARAM_INT(autotune, "WEFT_AUTOTUNE", "1", 0, 1, "", 0,
          "1: auto times the algorithms the model finds close; 0: the model alone")
PARAM_INT(auto_fastest, "WEFT_AUTO_FASTEST", "0", 0, 1, "", 0,
          "1: auto's trials may settle on any algorithm, bits may differ run to run; 0: only on those with the model's pick's bits")
PARAM_STR(tune, "WEFT_TUNE", "", NULL, "", 0,
          "cost-model constants (alpha=...,beta=...), over those of WEFT_TUNE_FILE")
PARAM_STR(tune_file, "WEFT_TUNE_FILE", "", NULL, "", 0,
          "file of cost-model constants, as weft-tune writes it")

/* diagnostics */
PARAM_STR(debug, "WEFT_DEBUG", "WARN", log_check_debug, "WEFT_LOG", 0,
          "ERROR, WARN, INFO, TRACE, or subsystem names (INFO from those only)")
PARAM_STR(debug_subsys, "WEFT_DEBUG_SUBSYS", "", log_check_subsys, "", 0,
          "subsystems that log (INIT,COLL,NET,STORE,AUTH,SHM,TUNING; ^ excludes); empty: all")

/* training engine */
PARAM_INT(threads, "WEFT_THREADS", "0", 0, 1 << 20, "", 0,
          "compute threads per rank; 0: cores / ranks on this host")
PARAM_ENUM(matmul, "WEFT_MATMUL", "auto", "auto|portable|openblas", "", 0,
           "matmul backend; auto: the faster of OpenBLAS and the portable kernel, measured once per host")
PARAM_ENUM(matmul_isa, "WEFT_MATMUL_ISA", "auto", "auto|amx|avx512bf16|avx512|avx2|c", "", 0,
           "widest instruction set the portable kernel may use (amx: bf16 products on AMX tiles, avx512bf16: on VDPBF16PS, each refused without it; below them bf16 is widened to fp32); auto: the CPU's best")
PARAM_DBL(peak_gflops, "WEFT_PEAK_GFLOPS", "0", 0, 1e9, "", 0,
          "one thread's matmul peak for MFU, GFLOP/s; 0: measured once per host")
PARAM_STR(peak_file, "WEFT_PEAK_FILE", "", NULL, "", 0,
          "where the measured peak is kept; empty: ~/.cache/weft/peak-HOST")
PARAM_STR(bpe_dir, "WEFT_BPE_DIR", "", NULL, "", 0,
          "folder of GPT-2's encoder.json and vocab.bpe; empty: the installed or build copy")
PARAM_STR(fashion_mnist, "WEFT_FASHION_MNIST", WEFT_FASHION_MNIST_DIR, NULL, "", 0,
          "directory of the Fashion-MNIST files")

/* parameter server */
PARAM_ENUM(role, "WEFT_ROLE", "auto", "auto|worker|server", "", 0,
           "this rank's part in a parameter-server job; auto: from its rank")
PARAM_INT(num_workers, "WEFT_NUM_WORKERS", "0", 0, 1 << 20, "", 0,
          "workers of a parameter-server job (ranks 0..N-1); 0: all ranks but one")
PARAM_INT(ps_sndbuf, "WEFT_PS_SNDBUF", "64K", 0, 1 << 30, "", PARAM_BYTES,
          "send buffer of a worker's link to a server; 0: the kernel's own")
