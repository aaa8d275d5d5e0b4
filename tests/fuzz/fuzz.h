/* The interface of a fuzz target (tests/fuzz/fuzz_<parser>.c): one function that hands an input to
 * a parser. It is libFuzzer's entry point, so a target also builds with `clang -fsanitize=fuzzer`;
 * without clang, tests/fuzz/driver.c supplies main(): seed corpora, mutations, crash capture.
 * A target returns 0 whatever the parser says: a rejected input is the expected outcome; only a
 * crash, a sanitizer report, an abort or an exit is a finding. */
#ifndef ZY_FUZZ_H
#define ZY_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs the parser on data [size]. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* For parsers that read a path: writes data [size] to this process's scratch file (rewritten on
 * each call) and returns its path. */
const char *fuzz_input_file(const uint8_t *data, size_t size);
/* Where the scratch files go: $TMPDIR, else /dev/shm (memory: a file per input costs no disk),
 * else /tmp. */
const char *fuzz_scratch_dir(void);
/* The same as a heap copy with a NUL after the last byte (for parsers of text). */
char *fuzz_input_text(const uint8_t *data, size_t size);

#endif
