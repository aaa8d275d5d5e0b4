/* The zayac subcommands; each lives in tools/cmd_<name>.c and returns the process exit code. */
#ifndef ZY_CMDS_H
#define ZY_CMDS_H

int cmd_info(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_supervise(int argc, char **argv);
int cmd_version(int argc, char **argv);

#endif
