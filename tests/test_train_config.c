/* Training configuration: defaults, file + overrides, and one clear error per bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "train/train_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static const char *write_cfg(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(zy_write_file_atomic(path, text, strlen(text)), ZY_OK);
    return path;
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zy_tcfg_XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zy_remove_tree(dir);
    return 0;
}

static void test_file_and_overrides(void **state) {
    (void)state;
    const char *p =
        write_cfg("ok.json", "{\"model\": \"tiny\", \"data\": [{\"path\": \"a\", \"weight\": 1},"
                             " {\"path\": \"b\", \"weight\": 3}], \"steps\": 50,"
                             " \"optimizer\": {\"name\": \"adamw\", \"lr\": 0.002},"
                             " \"schedule\": {\"kind\": \"wsd\", \"warmup\": 5}}");
    const char *over[] = {"steps=80", "optimizer.lr=0.004", "out_dir=somewhere",
                          "balance.step_size=0.01"};
    zy_train_config c;
    char *json = NULL;
    if (train_config_build(&c, p, over, 4, &json) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_int_equal(c.n_sources, 2);
    assert_string_equal(c.sources[1].path, "b");
    assert_true(c.sources[1].weight == 3.0);
    assert_int_equal(c.steps, 80);
    assert_int_equal(c.schedule.total_steps, 80);
    assert_int_equal(c.optim.use_muon, 0);
    assert_true(c.optim.lr == 0.004f && c.schedule.lr == 0.004f);
    assert_int_equal(c.schedule.kind, ZY_SCHED_WSD);
    assert_int_equal(c.schedule.warmup_steps, 5);
    assert_string_equal(c.out_dir, "somewhere");
    assert_true(c.balance.step_size == 0.01f);
    assert_int_equal(c.model.hidden_size, 128); /* the tiny preset */
    assert_non_null(strstr(json, "\"lr\":\t0.004"));
    free(json);
}

/* Each bad config fails with a message that names the file and the field (the errors of single
 * settings and of --set values: test_settings.c). */
static void expect_error(const char *text, const char *override, const char *needle) {
    const char *p = write_cfg("bad.json", text);
    zy_train_config c;
    const char *over[1] = {override};
    int rc = train_config_build(&c, p, over, override ? 1 : 0, NULL);
    if (rc == ZY_OK) fail_msg("accepted: %s", text);
    int malformed_override = override && !strchr(override, '=');
    if (!strstr(zy_errmsg(), needle) || (!malformed_override && !strstr(zy_errmsg(), p)))
        fail_msg("error '%s' lacks '%s' or the file name", zy_errmsg(), needle);
}

static void test_bad_inputs(void **state) {
    (void)state;
    expect_error("{\"data\": \"x\", \"stepz\": 5}", NULL, "unknown key stepz");
    expect_error("{\"data\": \"x\", \"steps\": \"many\"}", NULL, "steps must be a number");
    expect_error("{\"data\": \"x\", \"steps\": 0}", NULL, "steps = 0 is outside");
    expect_error("{\"data\": \"x\", \"batch_size\": 2.5}", NULL,
                 "batch_size = 2.5 must be an integer");
    expect_error("{\"steps\": 5}", NULL, "data: at least one source");
    expect_error("{\"data\": [{\"weight\": 1}]}", NULL, "data[0].path is required");
    expect_error("{\"data\": [{\"path\": \"a\", \"weight\": -1}]}", NULL, "data[0].weight");
    expect_error("{\"data\": \"x\", \"optimizer\": {\"name\": \"sgd\"}}", NULL, "optimizer.name");
    expect_error("{\"data\": \"x\", \"optimizer\": {\"lrr\": 1}}", NULL,
                 "unknown key optimizer.lrr");
    expect_error("{\"data\": \"x\", \"schedule\": {\"kind\": \"linear\"}}", NULL, "schedule.kind");
    expect_error("{\"data\": \"x\", \"seq_len\": 100000}", NULL, "max_position_embeddings");
    expect_error("{\"data\": \"x\", \"model\": \"no-such-preset\"}", NULL, "no-such-preset");
    expect_error("{\"data\": \"x\", \"steps\": 5", NULL, "not valid JSON");
    expect_error("[1, 2]", NULL, "must be a JSON object");
    zy_train_config c;
    char missing[256];
    snprintf(missing, sizeof missing, "%s/none.json", dir);
    assert_int_equal(train_config_build(&c, missing, NULL, 0, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), missing));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_and_overrides),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
