/* Runs argv[1..] as a child subreaper (PR_SET_CHILD_SUBREAPER; the flag survives execv), so
 * that the scratch backend's supervisor adopts every orphan of its sandbox. A binary rather
 * than a preexec hook in Python: Python can then spawn it with vfork, which for a large test
 * process costs tens of milliseconds less than the fork a preexec hook needs. */
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROGRAM [ARG...]\n", argv[0]);
        return 127;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("prctl(PR_SET_CHILD_SUBREAPER)");
        return 127;
    }
    execv(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
