# zayac build. `make` builds build/zayac and build/libzayac.a; `make test` builds and runs the tests.
#   CUDA=0|1   build the CUDA code (default: 1 when nvcc is on PATH). The CPU build needs no CUDA.
#   MPI=0|1    build the MPI communicator for CPU ranks (default: 1 when mpicc is on PATH; Open MPI)
#   SAN=1      AddressSanitizer + UndefinedBehaviorSanitizer (tests in CI run this way)
#   BUILD=dir  build folder (default build, or build-san with SAN=1)
#   DEPS_ROOT  a folder with Debian packages unpacked by `dpkg -x` (used on the GPU machine)
CC       ?= gcc
NVCC     ?= nvcc
CUDA_HOME ?= /usr/local/cuda
CUDA     ?= $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
MPICC    ?= mpicc
MPI      ?= $(if $(shell command -v $(MPICC) 2>/dev/null),1,0)
SAN      ?= 0
BUILD    ?= $(if $(filter 1,$(SAN)),build-san,build)
WERROR   ?= 0
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a

MULTIARCH := x86_64-linux-gnu
BLAS_DIR ?= $(firstword $(wildcard $(DEPS_ROOT)/usr/lib/$(MULTIARCH)/openblas-openmp /usr/lib/$(MULTIARCH)/openblas-openmp))

CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -fopenmp -Isrc -Wall -Wextra -Wshadow -Wno-unused-parameter \
            -Wstrict-prototypes -Wmissing-prototypes -MMD -MP
LDLIBS   := -lcjson -lpcre2-8 -lzstd -lz -lm -lpthread
LDFLAGS  := -fopenmp
ifneq ($(BLAS_DIR),)
LDFLAGS  += -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR)
endif
LDLIBS   := -lopenblas $(LDLIBS)
ifneq ($(DEPS_ROOT),)
CFLAGS   += -I$(DEPS_ROOT)/usr/include -I$(DEPS_ROOT)/usr/include/$(MULTIARCH) \
            -I$(DEPS_ROOT)/usr/include/$(MULTIARCH)/openblas-openmp
LDFLAGS  += -L$(DEPS_ROOT)/usr/lib/$(MULTIARCH) -Wl,-rpath,$(abspath $(DEPS_ROOT))/usr/lib/$(MULTIARCH)
endif
ifeq ($(WERROR),1)
CFLAGS   += -Werror
endif
ifeq ($(SAN),1)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif

SRC_C    := $(sort $(shell find src -name '*.c'))
SRC_CU   :=
ifeq ($(CUDA),1)
SRC_CU   := $(sort $(shell find src -name '*.cu'))
CFLAGS   += -DZY_HAVE_CUDA -I$(CUDA_HOME)/include
NVFLAGS  := -O2 -g -std=c++17 $(CUDA_ARCH) -Isrc -DZY_HAVE_CUDA -Xcompiler -Wall,-Wno-unused-parameter,-fopenmp \
            -MMD -MP $(NVEXTRA)
LDFLAGS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64
LDLIBS   += -lnccl -lcublasLt -lcublas -lcudart_static -ldl -lrt -lstdc++
endif

# MPI: gcc with the flags the wrapper would add; without it src/dist/nompi.c stubs the backend.
ifeq ($(MPI),1)
CFLAGS   += -DZY_HAVE_MPI $(shell $(MPICC) --showme:compile)
LDLIBS   += $(shell $(MPICC) --showme:link)
endif

OBJ      := $(SRC_C:%.c=$(BUILD)/%.o) $(SRC_CU:%.cu=$(BUILD)/%.cu.o)
LIB      := $(BUILD)/libzayac.a
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# The build's configuration, kept in $(BUILD)/config.stamp and rewritten only when it changes:
# every object depends on it, so switching CUDA=0/1, MPI=0/1, SAN, DEPS_ROOT or the flags in one
# build folder rebuilds everything, and a repeated identical make does nothing.
CONFIG_STAMP := $(BUILD)/config.stamp
CONFIG_TEXT  := CC=$(CC) NVCC=$(NVCC) CUDA=$(CUDA) MPI=$(MPI) SAN=$(SAN) DEPS_ROOT=$(DEPS_ROOT) \
                CFLAGS=$(CFLAGS) NVFLAGS=$(NVFLAGS) LDFLAGS=$(LDFLAGS) LDLIBS=$(LDLIBS)
# What `zayac --version` prints: git describe of this checkout, else a fixed string. Only
# tools/cmd_version.c sees it (through its own stamp), so a new commit recompiles that file alone.
ZAYAC_VERSION ?= $(or $(shell git describe --always --dirty 2>/dev/null),unversioned)
VERSION_STAMP := $(BUILD)/version.stamp

.PHONY: all tests test clean format format-check FORCE
.SECONDARY:
all: $(BUILD)/zayac

$(CONFIG_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(CONFIG_TEXT)' | cmp -s - $@ || echo '$(CONFIG_TEXT)' >$@

$(VERSION_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(ZAYAC_VERSION)' | cmp -s - $@ || echo '$(ZAYAC_VERSION)' >$@

$(BUILD)/tools/cmd_version.o: $(VERSION_STAMP)
$(BUILD)/tools/cmd_version.o: CFLAGS += -DZAYAC_VERSION='"$(ZAYAC_VERSION)"'

$(BUILD)/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB): $(OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/zayac: $(TOOL_OBJ) $(LIB)
	$(CC) $(LDFLAGS) $(TOOL_OBJ) $(LIB) $(LDLIBS) -o $@

# Helpers shared by test programs (tests/*.c that are not test_*.c), linked from an archive so a
# test program takes only what it uses.
TEST_HELP_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
TEST_HELP     := $(BUILD)/tests/libtesthelp.a

$(TEST_HELP): $(TEST_HELP_SRC:%.c=$(BUILD)/%.o)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_HELP) $(LIB)
	$(CC) $(LDFLAGS) $< $(TEST_HELP) $(LIB) -lcmocka $(LDLIBS) -o $@

# Builds the test programs without running them (the GPU scripts run them one by one).
tests: $(TESTS) $(BUILD)/zayac

# Kernel and GEMM variants kept for tuning, out of libzayac (dev/README.md): `make dev` builds
# $(BUILD)/dev/libzayac_dev.a from dev/ and the programs dev/test_*.c (cmocka, GPU tests) and
# dev/time_*.cu (timings) against it and libzayac. CUDA builds only; CI does not build it.
DEV_PROG_SRC := $(sort $(wildcard dev/test_*.c dev/time_*.cu))
DEV_LIB_SRC  := $(filter-out $(DEV_PROG_SRC),$(sort $(wildcard dev/*.c dev/*.cu)))
DEV_LIB_OBJ  := $(patsubst %.cu,$(BUILD)/%.cu.o,$(DEV_LIB_SRC:%.c=$(BUILD)/%.o))
DEV_LIB      := $(BUILD)/dev/libzayac_dev.a
DEV_PROGS    := $(patsubst dev/%.cu,$(BUILD)/dev/%,$(DEV_PROG_SRC:dev/%.c=$(BUILD)/dev/%))

.PHONY: dev
ifeq ($(CUDA),1)
dev: $(DEV_PROGS)
else
dev:
	@echo "make dev: the dev/ variants are CUDA code: build with CUDA=1 (nvcc)" >&2; exit 2
endif

$(BUILD)/dev/%.o: CFLAGS += -Itests
$(BUILD)/dev/%.cu.o: NVFLAGS += -Itests

$(DEV_LIB): $(DEV_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/dev/%: $(BUILD)/dev/%.o $(DEV_LIB) $(LIB)
	$(CC) $(LDFLAGS) $< $(DEV_LIB) $(LIB) -lcmocka $(LDLIBS) -o $@

$(BUILD)/dev/%: $(BUILD)/dev/%.cu.o $(DEV_LIB) $(LIB)
	$(CC) $(LDFLAGS) $< $(DEV_LIB) $(LIB) $(LDLIBS) -o $@

# Fuzz targets (tests/fuzz/): one program per parser, tests/fuzz/fuzz_<parser>.c with the
# deterministic driver tests/fuzz/driver.c; `make fuzz` builds them, scripts/fuzz.sh runs them on
# their seed corpora (tests/fuzz/corpus/<parser>/) for a bounded time (scripts/test.sh does).
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_HELP := $(BUILD)/tests/fuzz/driver.o $(BUILD)/tests/fuzz/util.o
FUZZ      := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)

$(BUILD)/fuzz/%: $(BUILD)/tests/fuzz/%.o $(FUZZ_HELP) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $< $(FUZZ_HELP) $(LIB) $(LDLIBS) -o $@

.PHONY: fuzz
fuzz: $(FUZZ)

# Tests find the zayac binary and the fixtures through these variables.
test: $(TESTS) $(BUILD)/zayac
	ZAYAC_BIN=$(abspath $(BUILD)/zayac) ZAYAC_ROOT=$(CURDIR) bash scripts/run_tests.sh $(TESTS)

format:
	clang-format -i $(shell find src tools tests dev -name '*.[ch]' -o -name '*.cu')

format-check:
	clang-format --dry-run --Werror $(shell find src tools tests dev -name '*.[ch]' -o -name '*.cu')

clean:
	rm -rf build build-san

-include $(OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TESTS:%=%.d) $(TEST_HELP_SRC:%.c=$(BUILD)/%.d)
-include $(FUZZ_SRC:%.c=$(BUILD)/%.d) $(FUZZ_HELP:.o=.d)
-include $(DEV_LIB_OBJ:.o=.d) $(DEV_PROGS:%=%.d) $(DEV_PROGS:%=%.cu.d)
