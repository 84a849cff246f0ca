/* Whole-process wall time of two commands, in paired, alternating runs.
 *
 *   run-timer RUNS -- COMMAND_A [ARGS...] -- COMMAND_B [ARGS...]
 *
 * Runs A then B, then B then A, and so on, RUNS times each (so drift on a shared machine hits
 * both alike), each from fork to its exit, with stdout and stderr sent to /dev/null. Any run
 * that fails aborts with its status. Prints two lines, A then B: "p50_us p99_us max_us RUNS".
 */
#include "latency.h"
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static long long run(char **argv)
{
    long long t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) { perror("waitpid"); exit(1); }
    long long elapsed = now_ns() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "run-timer: %s failed (status %d)\n", argv[0], status);
        exit(1);
    }
    return elapsed;
}

int main(int argc, char **argv)
{
    int b = 0;
    for (int i = 3; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) { b = i; break; }
    if (argc < 6 || strcmp(argv[2], "--") != 0 || b == 0 || b == 3 || b == argc - 1) {
        fprintf(stderr, "usage: %s RUNS -- COMMAND_A [ARGS...] -- COMMAND_B [ARGS...]\n", argv[0]);
        return 2;
    }
    int runs = atoi(argv[1]);
    if (runs <= 0) { fprintf(stderr, "run-timer: RUNS must be > 0\n"); return 2; }
    argv[b] = NULL;
    char **a_argv = argv + 3, **b_argv = argv + b + 1;
    long long *a = calloc((size_t)runs, sizeof *a), *bt = calloc((size_t)runs, sizeof *bt);
    run(a_argv); run(b_argv); /* warm the page cache */
    for (int i = 0; i < runs; i++) {
        if (i % 2 == 0) { a[i] = run(a_argv); bt[i] = run(b_argv); }
        else { bt[i] = run(b_argv); a[i] = run(a_argv); }
    }
    report_latencies(a, runs);
    report_latencies(bt, runs);
    return 0;
}
