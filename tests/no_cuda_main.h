/* The whole main of a GPU test program in a build without CUDA: one test, skipped. Include it
 * after <cmocka.h> in the file's #else branch of ZY_HAVE_CUDA. */
#ifndef ZY_TESTS_NO_CUDA_MAIN_H
#define ZY_TESTS_NO_CUDA_MAIN_H

static void test_no_cuda(void **state) {
    (void)state;
    skip();
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
