/* A wall-clock step for one process, as NTP or a VM migration makes one: LD_PRELOAD it
 * and write a number of seconds to the file named by ATP_TEST_CLOCK_STEP_FILE; the wall
 * clock of the process (time.time(), SQLite's 'now', datetime.now()) moves by that much
 * within a twentieth of a second. The monotonic and boot-time clocks are left alone, and
 * so are sleeps and timed waits (Debian's libfaketime 0.9.10 breaks Python 3.11's
 * time.sleep when it leaves the monotonic clock alone: its issue #426).
 *
 * Built by tests/clockstep/__init__.py with the machine's C compiler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static double offset_seconds;
static struct timespec last_read;

static void load(void) {
    if (!real_clock_gettime)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
}

static double offset(void) {
    struct timespec now;
    load();
    real_clock_gettime(CLOCK_MONOTONIC, &now);
    double since = (now.tv_sec - last_read.tv_sec) + (now.tv_nsec - last_read.tv_nsec) / 1e9;
    if (last_read.tv_sec == 0 || since > 0.05) {
        const char *path = getenv("ATP_TEST_CLOCK_STEP_FILE");
        FILE *file = path ? fopen(path, "r") : NULL;
        if (file) {
            double read;
            if (fscanf(file, "%lf", &read) == 1)
                offset_seconds = read;
            fclose(file);
        }
        last_read = now;
    }
    return offset_seconds;
}

static void shift(struct timespec *moment) {
    double step = offset();
    long long nanoseconds = (long long)(step * 1e9);
    moment->tv_sec += nanoseconds / 1000000000LL;
    moment->tv_nsec += nanoseconds % 1000000000LL;
    if (moment->tv_nsec >= 1000000000L) { moment->tv_sec += 1; moment->tv_nsec -= 1000000000L; }
    if (moment->tv_nsec < 0) { moment->tv_sec -= 1; moment->tv_nsec += 1000000000L; }
}

int clock_gettime(clockid_t clock, struct timespec *moment) {
    load();
    int result = real_clock_gettime(clock, moment);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        shift(moment);
    return result;
}

int gettimeofday(struct timeval *restrict moment, void *restrict zone) {
    struct timespec now;
    (void)zone;
    clock_gettime(CLOCK_REALTIME, &now);
    if (moment) {
        moment->tv_sec = now.tv_sec;
        moment->tv_usec = now.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *where) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (where)
        *where = now.tv_sec;
    return now.tv_sec;
}
