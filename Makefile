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

$(BUILD)/libshardckpt.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(LDLIBS_ALL)

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

$(BUILD)/libshardckpt_mpi.so: $(BUILD)/obj/mpi/comm_mpi.o $(BUILD)/libshardckpt.so
	$(MPI_CC) -shared -o $@ $< -L$(BUILD) -lshardckpt $(LDFLAGS)

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
bench: $(BUILD)/bench/bench
	$(BUILD)/bench/bench

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
# any crash, leak, hang or sanitizer report fails it.  CI runs it after `make test`.
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

clean:
	rm -rf build build-asan
