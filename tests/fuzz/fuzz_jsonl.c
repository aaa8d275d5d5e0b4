/* Fuzz target: a JSON Lines file read as documents (data/docread.h), with the default text field
 * and with another, failing on a bad line and skipping (and counting) bad lines; every document
 * handed over is read to its end. */
#include "base/err.h"
#include "data/docread.h"
#include "fuzz.h"

static int touch_doc(void *ctx, const char *text, size_t len) {
    size_t *sum = ctx;
    for (size_t i = 0; i < len; i++) *sum += (unsigned char)text[i];
    return ZY_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_file(data, size);
    static const char *const fields[] = {"text", "content"};
    for (int f = 0; f < 2; f++)
        for (int skip = 0; skip <= 1; skip++) {
            zy_docread_opts o = docread_defaults(DOCSEP_BLANK_LINE);
            o.format = DOCFMT_JSONL;
            o.text_field = fields[f];
            o.skip_bad_lines = skip;
            zy_docread_stats st = {0};
            size_t sum = 0;
            docread_file(path, &o, touch_doc, &sum, &st);
        }
    zy_err_clear();
    return 0;
}
