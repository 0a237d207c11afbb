/* Takes inotify instances until the kernel refuses one (or WANT are held),
 * prints "held N" and the refusal's errno name, then holds them for HOLD
 * seconds. e2e_userns runs it in one container to use up the per-user
 * budget, and again elsewhere to see whose budget that was.
 *
 *   inotify_hold WANT HOLD
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int want = argc > 1 ? atoi(argv[1]) : 1;
    int hold = argc > 2 ? atoi(argv[2]) : 0;
    int held = 0, err = 0;
    while (held < want) {
        if (inotify_init1(IN_CLOEXEC) < 0) {
            err = errno;
            break;
        }
        held++;
    }
    printf("held %d %s\n", held, err == 0 ? "ok" : err == EMFILE ? "EMFILE" : "error");
    fflush(stdout);
    if (hold > 0)
        sleep(hold);
    return 0;
}
