/* A process tree for the stop-signal tests, knowing nothing of memgap.

     sig_tree plain MARKER      fork a child, which forks a grandchild; each says
                                "sig_tree role=ROLE pid=PID" on stdout, then waits for a signal
     sig_tree stubborn MARKER   the same, but the child ignores SIGTERM: only SIGKILL ends it

   None of them execs: MARKER is in the command line of every process of the tree, for the test
   to find any of them left running. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void say(const char *role) {
    printf("sig_tree role=%s pid=%d\n", role, (int)getpid());
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: sig_tree plain|stubborn MARKER\n");
        return 2;
    }
    int stubborn = strcmp(argv[1], "stubborn") == 0;
    say("parent");
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        if (stubborn) signal(SIGTERM, SIG_IGN);
        say("child");
        pid_t grandchild = fork();
        if (grandchild < 0) return 1;
        if (grandchild == 0) {
            signal(SIGTERM, SIG_DFL); /* the child's SIG_IGN is inherited: not the grandchild's */
            say("grandchild");
        }
    }
    for (;;) pause();
}
