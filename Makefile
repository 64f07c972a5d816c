# shardckpt - build with plain `make`; `make test` runs every test suite (see README).
CC      ?= cc
AR      ?= ar
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
OPT     ?= -O2 -g
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS  ?=
CPPFLAGS_ALL := -Iinclude -Isrc -D_GNU_SOURCE
CFLAGS_ALL   := -std=c11 $(OPT) $(WARN) -fPIC $(CFLAGS)
LDLIBS_ALL   := -lisal -lpthread -lm
# The library's version, from include/shardckpt.h (one place); SOMAJOR is the shared library's soname version.
VERSION := $(shell sed -n 's/^\#define SCK_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9][0-9]*\)$$/\2/p' include/shardckpt.h | paste -sd. -)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))

# The core library: everything in src/<layer>/ (docs/DESIGN.md) except optional backends (MPI has its own library).
LIB_SRC := $(filter-out src/comm/comm_mpi.c,$(wildcard src/*/*.c))
LIB_OBJ := $(LIB_SRC:src/%.c=$(BUILD)/obj/lib/%.o)
CLI_SRC := $(wildcard tools/*.c)
CLI_OBJ := $(CLI_SRC:tools/%.c=$(BUILD)/obj/tools/%.o)
TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.o)
HDRS := $(wildcard include/*.h src/*/*.h tests/*.h tools/*.h)

.PHONY: all lib cli tests test test-c test-asan test-interop demo clean fuzz fuzz-smoke

all: lib cli

lib: $(BUILD)/libshardckpt.a $(BUILD)/libshardckpt.so $(BUILD)/libshardckpt_internal.a
cli: $(BUILD)/bin/shardckpt
tests: $(BUILD)/tests/run_tests

# Library objects export only SCK_API functions (include/*.h); everything else is hidden (docs/DESIGN.md).
LIB_VIS := -fvisibility=hidden

$(BUILD)/obj/lib/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(LIB_VIS) -c $< -o $@

# The CLI is built like any program using the library: public headers only (include/, with the advanced tier),
# no -Isrc, linked against the sealed archive.
CPPFLAGS_CLI := -Iinclude -D_GNU_SOURCE
$(BUILD)/obj/tools/%.o: tools/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_CLI) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -c $< -o $@

# The public static library is sealed: one relocatable object whose hidden (internal) globals are made
# local, so a program's own write_file or plan_build never clashes with ours.  Tests, bench and fuzz call
# internals and link libshardckpt_internal.a, the plain objects.
LD      ?= ld
OBJCOPY ?= objcopy
$(BUILD)/libshardckpt.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(LD) -r -o $(BUILD)/obj/shardckpt_all.o $^
	$(OBJCOPY) --localize-hidden $(BUILD)/obj/shardckpt_all.o
	rm -f $@ && $(AR) rcs $@ $(BUILD)/obj/shardckpt_all.o

$(BUILD)/libshardckpt_internal.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

# The shared library's soname carries the major version: programs linked against 0.x load libshardckpt.so.0.
$(BUILD)/libshardckpt.so.$(VERSION): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libshardckpt.so.$(SOMAJOR) -o $@ $^ $(LDFLAGS) $(LDLIBS_ALL)

# Every shared library's soname and development links (libshardckpt, _mpi, _cuda) point at its versioned file.
$(BUILD)/lib%.so: $(BUILD)/lib%.so.$(VERSION)
	ln -sf lib$*.so.$(VERSION) $(BUILD)/lib$*.so.$(SOMAJOR)
	ln -sf lib$*.so.$(VERSION) $@

$(BUILD)/bin/shardckpt: $(CLI_OBJ) $(BUILD)/libshardckpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $(CLI_OBJ) $(BUILD)/libshardckpt.a $(LDFLAGS) $(LDLIBS_ALL)

$(BUILD)/tests/run_tests: $(TEST_OBJ) $(BUILD)/libshardckpt_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $(TEST_OBJ) $(BUILD)/libshardckpt_internal.a $(LDFLAGS) $(LDLIBS_ALL)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libshardckpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libshardckpt.a $(LDFLAGS) $(LDLIBS_ALL)

# MPI (optional, built when the compiler wrapper exists): libshardckpt_mpi from src/comm/comm_mpi.c, the MPI build of
# examples/fsdp_train and the MPI tests.  `make MPICC=mpicc.mpich ...` builds against MPICH instead of the
# default (Open MPI on Debian).  The wrapper compiles with $(CC): Open MPI reads OMPI_CC, MPICH reads MPICH_CC.
MPICC    ?= mpicc
HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1)
MPI_CC    = OMPI_CC=$(CC) MPICH_CC=$(CC) $(MPICC)
MPI_LIBS := $(BUILD)/libshardckpt_mpi.a $(BUILD)/libshardckpt.a
MPI_TESTS := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/mpi_*.c))

.PHONY: mpi mpi-tests examples test-mpi

ifeq ($(HAVE_MPI),1)
mpi: $(BUILD)/libshardckpt_mpi.a $(BUILD)/libshardckpt_mpi.so
else
mpi:
	@echo "no $(MPICC): the MPI backend is not built (apt-get install openmpi-bin libopenmpi-dev)"
endif

$(BUILD)/obj/mpi/comm_mpi.o: src/comm/comm_mpi.c $(HDRS)
	@mkdir -p $(dir $@)
	$(MPI_CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(LIB_VIS) -c $< -o $@

$(BUILD)/libshardckpt_mpi.a: $(BUILD)/obj/mpi/comm_mpi.o
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/libshardckpt_mpi.so.$(VERSION): $(BUILD)/obj/mpi/comm_mpi.o $(BUILD)/libshardckpt.so
	$(MPI_CC) -shared -Wl,-soname,libshardckpt_mpi.so.$(SOMAJOR) -o $@ $< -L$(BUILD) -lshardckpt $(LDFLAGS)

# fsdp_train is the MPI build when MPI is there (it still runs as threads with --threads N), else threads only.
ifeq ($(HAVE_MPI),1)
$(BUILD)/examples/fsdp_train: examples/fsdp_train.c $(MPI_LIBS) $(HDRS)
	@mkdir -p $(dir $@)
	$(MPI_CC) -DFSDP_WITH_MPI $(CPPFLAGS_ALL) $(CFLAGS_ALL) -o $@ $< $(MPI_LIBS) $(LDFLAGS) $(LDLIBS_ALL)
endif

# The MPI tests call internals too: libshardckpt_mpi links against the internal archive as well as the sealed one.
MPI_TEST_LIBS := $(BUILD)/libshardckpt_mpi.a $(BUILD)/libshardckpt_internal.a
$(BUILD)/tests/mpi/%: tests/mpi/%.c $(MPI_TEST_LIBS) $(HDRS)
	@mkdir -p $(dir $@)
	$(MPI_CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -o $@ $< $(MPI_TEST_LIBS) $(LDFLAGS) $(LDLIBS_ALL)

# CUDA (optional, built when the toolkit's runtime header is found): libshardckpt_cuda from cuda/sck_cuda.c, the
# sck_device_ops of include/shardckpt_cuda.h (plain C against the CUDA runtime API; no kernels, no nvcc), and
# tests/cuda/cuda_device.c, which needs a GPU to run (it says "skipped: no CUDA device" where there is none).
# The core library never links CUDA.  `make cuda CUDA_HOME=/opt/cuda` for another toolkit.
CUDA_HOME ?= $(or $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)),/usr/local/cuda)
HAVE_CUDA := $(shell test -f $(CUDA_HOME)/include/cuda_runtime.h && echo 1)
CUDA_CPPFLAGS := -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart

.PHONY: cuda
ifeq ($(HAVE_CUDA),1)
cuda: $(BUILD)/libshardckpt_cuda.a $(BUILD)/libshardckpt_cuda.so $(BUILD)/tests/cuda/cuda_device
else
cuda:
	@echo "no CUDA toolkit under $(CUDA_HOME): libshardckpt_cuda is not built"
endif

$(BUILD)/obj/cuda/sck_cuda.o: cuda/sck_cuda.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CUDA_CPPFLAGS) $(CFLAGS_ALL) $(LIB_VIS) -c $< -o $@

$(BUILD)/libshardckpt_cuda.a: $(BUILD)/obj/cuda/sck_cuda.o
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/libshardckpt_cuda.so.$(VERSION): $(BUILD)/obj/cuda/sck_cuda.o $(BUILD)/libshardckpt.so
	$(CC) -shared -Wl,-soname,libshardckpt_cuda.so.$(SOMAJOR) -o $@ $< -L$(BUILD) -lshardckpt $(LDFLAGS) $(CUDA_LIBS)

$(BUILD)/tests/cuda/cuda_device: tests/cuda/cuda_device.c $(BUILD)/libshardckpt_cuda.a $(BUILD)/libshardckpt.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CUDA_CPPFLAGS) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libshardckpt_cuda.a $(BUILD)/libshardckpt.a $(LDFLAGS) \
		$(LDLIBS_ALL) $(CUDA_LIBS)

# A C trainer step that resumes torch 2.6's Adam state (tests/interop/t26_adam.py drives it).
$(BUILD)/tests/t26_adam: tests/interop/t26_adam.c $(BUILD)/libshardckpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libshardckpt.a $(LDFLAGS) $(LDLIBS_ALL)

$(BUILD)/tests/f32_diff: tests/mpi/f32_diff.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LDFLAGS) -lm

examples: $(BUILD)/examples/quickstart $(BUILD)/examples/fsdp_train
mpi-tests: $(if $(HAVE_MPI),mpi $(MPI_TESTS))

# The MPI suite (run_all.sh runs it): under mpirun when MPI is built; fsdp_train's threads runs always.  Some
# runs repeat with the examples and MPI tests built under ASan+UBSan in build-asan.
test-mpi: all examples $(BUILD)/tests/f32_diff mpi-tests
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="$(ASAN_OPT)" LDFLAGS="$(ASAN_LDFLAGS)" examples mpi-tests
	@SCK_MPI=$(if $(HAVE_MPI),1,0) SCK_ASAN_BUILD=build-asan sh tests/mpi/run.sh $(BUILD)

# The main job's demo (README): examples/fsdp_demo.sh trains examples/fsdp_train.c on 2 ranks (mpirun when MPI
# is built, else threads), checkpoints, resumes on 3 ranks, prints the loss curve and inspects the checkpoint.
demo: all examples $(if $(HAVE_MPI),mpi)
	@SCK_MPI=$(if $(HAVE_MPI),1,0) sh examples/fsdp_demo.sh $(BUILD)

# Benchmark (docs/PERFORMANCE.md): shardckpt vs raw pwrite/pread and torch DCP.  `BENCH_QUICK=1 make bench`
# for a short run; the environment variables it reads are listed by `$(BUILD)/bench/bench --help`.
BENCH_OBJ := $(patsubst bench/%.c,$(BUILD)/obj/bench/%.o,$(filter-out bench/crc32_compare.c,$(wildcard bench/*.c)))

$(BUILD)/obj/bench/%.o: bench/%.c bench/bench.h $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/bench/bench: $(BENCH_OBJ) $(BUILD)/libshardckpt_internal.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $(BENCH_OBJ) $(BUILD)/libshardckpt_internal.a $(LDFLAGS) $(LDLIBS_ALL)

# CRC-32 implementations compared (needs zlib1g-dev and libdeflate-dev as well).
$(BUILD)/bench/crc32_compare: bench/crc32_compare.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -o $@ $< -lisal -lz -ldeflate

.PHONY: bench bench-crc
bench: $(BUILD)/bench/bench $(BUILD)/libshardckpt.so
	SCK_LIBRARY=$(BUILD)/libshardckpt.so $(BUILD)/bench/bench

bench-crc: $(BUILD)/bench/crc32_compare
	$(BUILD)/bench/crc32_compare

# The one test command (README, CI): C unit tests, the same under ASan+UBSan, torch interop.
test: all tests mpi $(BUILD)/tests/t26_adam
	@BUILD=$(BUILD) sh tests/run_all.sh

test-c: tests
	@$(BUILD)/tests/run_tests

ASAN_OPT     := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
ASAN_LDFLAGS := -fsanitize=address,undefined
test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="$(ASAN_OPT)" LDFLAGS="$(ASAN_LDFLAGS)" all tests

test-interop: all $(BUILD)/tests/t26_adam
	@$(PYTHON) tests/interop/run_interop.py

# libFuzzer targets (fuzz/fuzz_*.c) against the library built with sanitizers and fuzzer coverage.
# `make fuzz-smoke` runs each for FUZZ_TIME seconds from a copy of its seed corpus (fuzz/corpus/NAME);
# any crash, leak, hang or sanitizer report fails it.  CI runs it before `make test`.
FUZZ_CC      ?= clang
FUZZ_TIME    ?= 60
FUZZ_NAMES   := $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_CFLAGS  := -std=c11 -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_OBJ     := $(LIB_SRC:src/%.c=$(BUILD)/fuzz/obj/%.o)

$(BUILD)/fuzz/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS_ALL) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_OBJ)
	$(FUZZ_CC) $(CPPFLAGS_ALL) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) -o $@ $(LDLIBS_ALL)

fuzz: $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)
.SECONDARY: $(FUZZ_OBJ)

fuzz-smoke: fuzz
	@set -e; for t in $(FUZZ_NAMES); do \
		work=$$(mktemp -d); cp fuzz/corpus/$$t/* $$work/ 2>/dev/null || true; \
		dict=; [ -f fuzz/$$t.dict ] && dict=-dict=fuzz/$$t.dict; \
		echo "== fuzz_$$t: $(FUZZ_TIME) s from $$(ls fuzz/corpus/$$t 2>/dev/null | wc -l) seeds"; \
		if ! $(BUILD)/fuzz/fuzz_$$t $$work $$dict -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 \
			-print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/crash-$$t- > $(BUILD)/fuzz/$$t.log 2>&1; then \
			tail -n 60 $(BUILD)/fuzz/$$t.log; rm -rf $$work; echo "fuzz_$$t FAILED (input saved as $(BUILD)/fuzz/crash-$$t-*)"; exit 1; fi; \
		grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' $(BUILD)/fuzz/$$t.log | tail -n 2; \
		echo "   corpus $$(ls $$work | wc -l) inputs"; rm -rf $$work; \
	done; echo "fuzz-smoke: $(words $(FUZZ_NAMES)) passed, 0 failed"

# Installation (README "Installing"): headers, the sealed static and the versioned shared libraries, the CLI
# and pkg-config files.  `make install PREFIX=/usr DESTDIR=/tmp/stage` stages for a package; the .pc files
# name PREFIX, not DESTDIR.  The MPI library, its header and shardckpt-mpi.pc come along when MPI is built (the CUDA
# ones, with shardckpt-cuda.pc naming CUDA_HOME's runtime, when CUDA is);
# shardckpt-mpi.pc requires the pkg-config module of the MPI it was built against.
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MPI_PC       := $(shell $(MPICC) -showme:version >/dev/null 2>&1 && echo ompi-c || echo mpich)
INSTALL_HDRS := $(filter-out $(if $(HAVE_MPI),,include/shardckpt_mpi.h) $(if $(HAVE_CUDA),,include/shardckpt_cuda.h),$(wildcard include/*.h))
PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	-e 's|@VERSION@|$(VERSION)|g; s|@MPI_PC@|$(MPI_PC)|g; s|@CUDA_HOME@|$(CUDA_HOME)|g'
D := $(DESTDIR)

# $(call install_lib,NAME): NAME.a, NAME.so.VERSION and its soname and development links into LIBDIR.
define install_lib
	install -m 644 $(BUILD)/$(1).a $(D)$(LIBDIR)/
	install -m 755 $(BUILD)/$(1).so.$(VERSION) $(D)$(LIBDIR)/
	ln -sf $(1).so.$(VERSION) $(D)$(LIBDIR)/$(1).so.$(SOMAJOR)
	ln -sf $(1).so.$(VERSION) $(D)$(LIBDIR)/$(1).so
endef

.PHONY: install uninstall
install: all $(if $(HAVE_MPI),mpi) $(if $(HAVE_CUDA),cuda)
	install -d $(D)$(BINDIR) $(D)$(LIBDIR) $(D)$(INCLUDEDIR) $(D)$(PKGCONFIGDIR)
	install -m 644 $(INSTALL_HDRS) $(D)$(INCLUDEDIR)/
	install -m 755 $(BUILD)/bin/shardckpt $(D)$(BINDIR)/
	$(call install_lib,libshardckpt)
	$(PC_SED) pkgconfig/shardckpt.pc.in > $(D)$(PKGCONFIGDIR)/shardckpt.pc
ifeq ($(HAVE_MPI),1)
	$(call install_lib,libshardckpt_mpi)
	$(PC_SED) pkgconfig/shardckpt-mpi.pc.in > $(D)$(PKGCONFIGDIR)/shardckpt-mpi.pc
endif
ifeq ($(HAVE_CUDA),1)
	$(call install_lib,libshardckpt_cuda)
	$(PC_SED) pkgconfig/shardckpt-cuda.pc.in > $(D)$(PKGCONFIGDIR)/shardckpt-cuda.pc
endif
	@# a system directory's loader cache needs refreshing; a staged or private prefix does not
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

# Removes exactly what install puts there (headers by name, not the directories).
uninstall:
	rm -f $(addprefix $(D)$(INCLUDEDIR)/,$(notdir $(wildcard include/*.h))) $(D)$(BINDIR)/shardckpt
	rm -f $(foreach n,libshardckpt libshardckpt_mpi libshardckpt_cuda,\
		$(addprefix $(D)$(LIBDIR)/$(n),.a .so .so.$(SOMAJOR) .so.$(VERSION)))
	rm -f $(addprefix $(D)$(PKGCONFIGDIR)/,shardckpt.pc shardckpt-mpi.pc shardckpt-cuda.pc)

clean:
	rm -rf build build-asan
