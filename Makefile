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

# The core library: everything in src/ except optional backends (MPI has its own library).
LIB_SRC := $(filter-out src/comm_mpi.c,$(wildcard src/*.c))
LIB_OBJ := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
CLI_SRC := $(wildcard tools/*.c)
CLI_OBJ := $(CLI_SRC:tools/%.c=$(BUILD)/obj/tools/%.o)
TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.o)
HDRS := $(wildcard include/*.h src/*.h tests/*.h tools/*.h)

.PHONY: all lib cli tests test test-c test-asan test-interop demo clean

all: lib cli

lib: $(BUILD)/libshardckpt.a $(BUILD)/libshardckpt.so
cli: $(BUILD)/bin/shardckpt
tests: $(BUILD)/tests/run_tests

$(BUILD)/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj/tools/%.o: tools/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/libshardckpt.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/libshardckpt.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(LDLIBS_ALL)

$(BUILD)/bin/shardckpt: $(CLI_OBJ) $(BUILD)/libshardckpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $(CLI_OBJ) $(BUILD)/libshardckpt.a $(LDFLAGS) $(LDLIBS_ALL)

$(BUILD)/tests/run_tests: $(TEST_OBJ) $(BUILD)/libshardckpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $(TEST_OBJ) $(BUILD)/libshardckpt.a $(LDFLAGS) $(LDLIBS_ALL)

$(BUILD)/examples/%: examples/%.c $(BUILD)/libshardckpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) -o $@ $< $(BUILD)/libshardckpt.a $(LDFLAGS) $(LDLIBS_ALL)

# The main job's demo: 4 ranks save a sharded tensor, 2 ranks load it resharded, then inspect it.
demo: all $(BUILD)/examples/quickstart
	@rm -rf $(BUILD)/demo_ckpt
	$(BUILD)/examples/quickstart $(BUILD)/demo_ckpt
	$(BUILD)/bin/shardckpt inspect $(BUILD)/demo_ckpt

# The one test command (README, CI): C unit tests, the same under ASan+UBSan, torch interop.
test: all tests
	@sh tests/run_all.sh

test-c: tests
	@$(BUILD)/tests/run_tests

test-asan:
	@$(MAKE) --no-print-directory BUILD=build-asan OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
		LDFLAGS="-fsanitize=address,undefined" all tests

test-interop: all
	@$(PYTHON) tests/interop/run_interop.py

clean:
	rm -rf build build-asan
