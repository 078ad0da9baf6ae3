/*
 * sweflow-nsinit: the tiny init of a container-free sandbox.
 *
 * Why C: a sandbox must open in milliseconds, so the setup (user/mount/pid/net/ipc/uts/cgroup
 * namespaces, overlayfs, /proc, /dev, /tmp, pivot_root) is done by one small exec'd program
 * instead of a chain of unshare/mount/chroot processes or a Python interpreter.
 *
 * Process layout:
 *   host python -> nsinit "keeper" (host pid namespace) -> nsinit "init" (PID 1 inside)
 *                                                         -> the persistent shell (respawned)
 * The keeper watches a lifeline pipe: when the host closes it (or dies), it SIGKILLs init, and
 * the kernel then kills every process of the pid namespace and drops its mounts. Init reports
 * on the control pipe: "pid <host pid of init>", "ready <shell pid>", "exit <status>".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ITEMS 64

struct bind {
    const char *src, *dst;
    int ro;
};

static struct {
    const char *sbdir, *workdir, *hostname, *upper, *work;
    const char *lowers[MAX_ITEMS];
    int nlowers;
    const char *cgroups[MAX_ITEMS];
    int ncgroups;
    const char *masks[MAX_ITEMS];
    int nmasks;
    struct bind binds[MAX_ITEMS];
    int nbinds;
    long long upper_size, tmp_size;
    int net, ctl_fd, lifeline_fd, host_root;
    char **shell_argv;
} cfg = {.workdir = "/", .hostname = "sandbox", .ctl_fd = -1, .lifeline_fd = -1};

static void die(const char *fmt, ...) {
    va_list ap;
    int saved = errno;
    fputs("sweflow-nsinit: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (saved)
        fprintf(stderr, ": %s", strerror(saved));
    fputc('\n', stderr);
    exit(125);
}

static void ctl(const char *fmt, ...) {
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (cfg.ctl_fd >= 0 && write(cfg.ctl_fd, buf, n) < 0) {
        /* the host is gone; the keeper will kill us */
    }
}

static void write_file(const char *path, const char *data, int must) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, data, strlen(data)) < 0) {
        if (must)
            die("write %s", path);
    }
    if (fd >= 0)
        close(fd);
}

static void mkdir_p(const char *path, mode_t mode) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(buf, mode);
            *p = '/';
        }
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        die("mkdir %s", buf);
}

static void xmount(const char *src, const char *dst, const char *type, unsigned long flags,
                   const char *data) {
    if (mount(src, dst, type, flags, data) < 0)
        die("mount %s on %s (%s)", src ? src : "none", dst, type ? type : "bind");
}

/* Make the bind mount at ``path`` read-only. Flags the kernel locked on it (nosuid, noexec, atime
 * inherited from the host's mount) must be repeated: a user namespace may add restrictions to a
 * mount, never lift them. */
static void remount_ro(const char *path, unsigned long extra) {
    struct statvfs sv;
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | extra;
    if (statvfs(path, &sv) == 0) {
        if (sv.f_flag & ST_NOSUID) flags |= MS_NOSUID;
        if (sv.f_flag & ST_NODEV) flags |= MS_NODEV;
        if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
        if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
        if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
        if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
    }
    xmount(NULL, path, NULL, flags, NULL);
}

static void touch(const char *path) {
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
        die("create %s", path);
    close(fd);
}

/* path joined under the merged root */
static const char *in_root(const char *rel) {
    static char buf[8][4096];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "%s/merged%s", cfg.sbdir, rel);
    return buf[i];
}

static void mount_overlay(void) {
    char opts[16384], scratch[4096];
    const char *upper = cfg.upper, *work = cfg.work;
    char tupper[4096], twork[4096];
    if (!upper) { /* tmpfs upper: private to this mount namespace, capped in size */
        snprintf(scratch, sizeof scratch, "%s/rw", cfg.sbdir);
        char size[64] = "";
        if (cfg.upper_size > 0)
            snprintf(size, sizeof size, "size=%lld,", cfg.upper_size);
        char data[128];
        snprintf(data, sizeof data, "%smode=0755", size);
        xmount("sweflow-upper", scratch, "tmpfs", MS_NOSUID | MS_NODEV, data);
        snprintf(tupper, sizeof tupper, "%s/upper", scratch);
        snprintf(twork, sizeof twork, "%s/work", scratch);
        mkdir_p(tupper, 0755);
        mkdir_p(twork, 0755);
        upper = tupper;
        work = twork;
    }
    int n = snprintf(opts, sizeof opts, "lowerdir=");
    for (int i = cfg.nlowers - 1; i >= 0; i--) /* overlayfs lists the topmost lower first */
        n += snprintf(opts + n, sizeof opts - n, "%s%s", cfg.lowers[i], i ? ":" : "");
    n += snprintf(opts + n, sizeof opts - n, ",upperdir=%s,workdir=%s", upper, work);
    const char *merged = in_root("");
    /* in a user namespace overlayfs must keep its metadata in user.* xattrs */
    char with_user[16500];
    snprintf(with_user, sizeof with_user, "%s,userxattr", opts);
    if (mount("sweflow", merged, "overlay", 0, with_user) == 0)
        return;
    if (mount("sweflow", merged, "overlay", 0, opts) < 0)
        die("mount overlay on %s (%s)", merged, opts);
}

static void bind_dev(const char *name) {
    char host[64];
    snprintf(host, sizeof host, "/dev/%s", name);
    char rel[64];
    snprintf(rel, sizeof rel, "/dev/%s", name);
    const char *dst = in_root(rel);
    touch(dst);
    xmount(host, dst, NULL, MS_BIND, NULL);
    /* the node is the host's own inode: read-only, so no chmod/chown/touch reaches the host
     * (reading and writing the device itself still work on a read-only mount) */
    remount_ro(dst, 0);
}

static void setup_dev(void) {
    const char *dev = in_root("/dev");
    mkdir_p(dev, 0755);
    xmount("sweflow-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=65536");
    const char *nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
    for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++)
        bind_dev(nodes[i]);
    mkdir_p(in_root("/dev/pts"), 0755);
    if (mount("devpts", in_root("/dev/pts"), "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620") == 0)
        symlink("pts/ptmx", in_root("/dev/ptmx"));
    mkdir_p(in_root("/dev/shm"), 01777);
    xmount("sweflow-shm", in_root("/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV,
           "mode=1777,size=67108864");
    symlink("/proc/self/fd", in_root("/dev/fd"));
    symlink("/proc/self/fd/0", in_root("/dev/stdin"));
    symlink("/proc/self/fd/1", in_root("/dev/stdout"));
    symlink("/proc/self/fd/2", in_root("/dev/stderr"));
}

static void setup_binds(void) {
    for (int i = 0; i < cfg.nbinds; i++) {
        const char *dst = in_root(cfg.binds[i].dst);
        struct stat st;
        if (stat(cfg.binds[i].src, &st) < 0)
            die("bind source %s", cfg.binds[i].src);
        if (S_ISDIR(st.st_mode)) {
            mkdir_p(dst, 0755);
        } else { /* a file: its directory may not exist in the layers */
            char parent[4096];
            snprintf(parent, sizeof parent, "%s", dst);
            char *slash = strrchr(parent, '/');
            if (slash && slash != parent) {
                *slash = 0;
                mkdir_p(parent, 0755);
            }
            touch(dst);
        }
        xmount(cfg.binds[i].src, dst, NULL, MS_BIND | MS_REC, NULL);
        if (cfg.binds[i].ro)
            remount_ro(dst, MS_NOSUID | MS_NODEV);
    }
}

static void loopback_up(void) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return;
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    close(s);
}

static void setup_root(void) {
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        die("make / private");
    mount_overlay();
    const char *dirs[] = {"/proc", "/sys", "/tmp", "/dev"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        mkdir_p(in_root(dirs[i]), 0755);
    for (int i = 0; i < cfg.nmasks; i++) { /* hide host paths when the host root is a layer */
        struct stat st;
        const char *p = in_root(cfg.masks[i]);
        if (stat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) { /* an empty directory in its place */
            xmount("sweflow-mask", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1048576");
        } else if (S_ISREG(st.st_mode)) { /* an empty, read-only file: /dev/null, as docker does */
            xmount("/dev/null", p, NULL, MS_BIND, NULL);
            remount_ro(p, 0);
        }
    }
    xmount("proc", in_root("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    /* The kernel-global files of /proc check only the file mode, and with the identity id map
     * of a root-run sandbox its root *is* uid 0 there (core_pattern would be a host escape):
     * read-only, as docker does. The shell cannot undo it (it has no CAP_SYS_ADMIN). */
    const char *proc_ro[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"};
    for (size_t i = 0; i < sizeof proc_ro / sizeof *proc_ro; i++) {
        const char *p = in_root(proc_ro[i]);
        if (access(p, F_OK) == 0) {
            xmount(p, p, NULL, MS_BIND, NULL);
            remount_ro(p, 0);
        }
    }
    if (mount("sysfs", in_root("/sys"), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) < 0) {
        /* sysfs needs a private network namespace; without one /sys stays an empty dir */
    }
    setup_dev();
    char tmpopts[64];
    snprintf(tmpopts, sizeof tmpopts, "mode=1777,size=%lld", cfg.tmp_size > 0 ? cfg.tmp_size : 1LL << 30);
    xmount("sweflow-tmp", in_root("/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, tmpopts);
    setup_binds();
    mkdir_p(in_root(cfg.workdir), 0755);
    if (chdir(in_root("")) < 0)
        die("chdir to merged root");
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        die("pivot_root");
    if (umount2(".", MNT_DETACH) < 0) /* the old root (the host's) is gone from this namespace */
        die("detach old root");
    if (chdir("/") < 0)
        die("chdir /");
    if (sethostname(cfg.hostname, strlen(cfg.hostname)) < 0)
        die("sethostname");
    if (!cfg.net)
        loopback_up();
}

/* Fork and exec the shell; a CLOEXEC pipe tells a failed exec (fatal: the layers lack the shell)
 * from a shell that ran and exited (respawned). */
static pid_t spawn_shell(void) {
    int probe[2];
    if (pipe2(probe, O_CLOEXEC) < 0)
        die("pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("fork shell");
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        write_file("/proc/self/oom_score_adj", "0", 0); /* init is protected, the shell is not */
        if (cfg.ctl_fd >= 0)
            close(cfg.ctl_fd);
        close(probe[0]);
        if (chdir(cfg.workdir) == 0)
            execv(cfg.shell_argv[0], cfg.shell_argv);
        int err = errno;
        if (write(probe[1], &err, sizeof err) < 0) {
            /* init learns of it from the exit status alone */
        }
        _exit(127);
    }
    close(probe[1]);
    int err = 0;
    ssize_t n = read(probe[0], &err, sizeof err);
    close(probe[0]);
    if (n > 0) {
        errno = err;
        die("exec %s in %s (is it in the layers?)", cfg.shell_argv[0], cfg.workdir);
    }
    return pid;
}

/* PID 1 inside: set up the root, run the shell, reap orphans, respawn the shell if it exits. */
static void run_init(void) {
    close(cfg.lifeline_fd);
    /* Root-run, uid 0 inside is host uid 0: /proc/1/exe, /proc/1/fd... would lead a process
     * inside to host files (the init binary, the control pipe). Non-dumpable, they need
     * CAP_SYS_PTRACE in the host's namespace. (A user-run host reads /proc/<init>/root itself,
     * so there init stays dumpable; its uid 0 inside is only that user.) */
    if (cfg.host_root)
        prctl(PR_SET_DUMPABLE, 0);
    setup_root();
    /* No CAP_SYS_ADMIN for anything the shell runs: no umount/remount of the read-only /proc,
     * /dev and bind mounts above, no sethostname. (A nested user namespace gets it back, but
     * only over copies of these mounts that the kernel locks.) */
    if (prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) < 0)
        die("drop CAP_SYS_ADMIN");
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL); /* PID 1 ignores signals sent from inside anyway */
    pid_t shell = spawn_shell();
    ctl("ready %d\n", shell);
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            die("waitpid");
        }
        if (pid != shell)
            continue;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        shell = spawn_shell();
        ctl("exit %d %d\n", code, shell);
    }
}

/* The keeper: stays in the host's pid namespace and ties init's life to the lifeline pipe. */
static int run_keeper(pid_t init) {
    ctl("pid %d\n", init);
    close(cfg.ctl_fd);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    dup2(devnull, 0); /* don't hold the shell's pipes open */
    dup2(devnull, 1);
    dup2(devnull, 2);
    int pidfd = syscall(SYS_pidfd_open, init, 0);
    struct pollfd fds[2] = {{.fd = cfg.lifeline_fd, .events = POLLIN}, {.fd = pidfd, .events = POLLIN}};
    for (;;) {
        int n = poll(fds, pidfd >= 0 ? 2 : 1, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (fds[1].revents)
            break; /* init ended by itself */
        if (fds[0].revents) {
            char c;
            if (read(cfg.lifeline_fd, &c, 1) <= 0) {
                kill(init, SIGKILL);
                break;
            }
        }
    }
    int status;
    while (waitpid(init, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static long long num(const char *s, const char *opt) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || v < 0)
        die("bad number for %s: %s", opt, s);
    return v;
}

static void parse(int argc, char **argv) {
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!v)
            die("option %s needs a value", a);
        i++;
        if (!strcmp(a, "--sbdir")) cfg.sbdir = v;
        else if (!strcmp(a, "--workdir")) cfg.workdir = v;
        else if (!strcmp(a, "--hostname")) cfg.hostname = v;
        else if (!strcmp(a, "--upper")) cfg.upper = v;
        else if (!strcmp(a, "--work")) cfg.work = v;
        else if (!strcmp(a, "--upper-size")) cfg.upper_size = num(v, a);
        else if (!strcmp(a, "--tmp-size")) cfg.tmp_size = num(v, a);
        else if (!strcmp(a, "--net")) cfg.net = (int)num(v, a);
        else if (!strcmp(a, "--ctl-fd")) cfg.ctl_fd = (int)num(v, a);
        else if (!strcmp(a, "--lifeline-fd")) cfg.lifeline_fd = (int)num(v, a);
        else if (cfg.nlowers < MAX_ITEMS && !strcmp(a, "--lower")) cfg.lowers[cfg.nlowers++] = v;
        else if (cfg.ncgroups < MAX_ITEMS && !strcmp(a, "--cgroup")) cfg.cgroups[cfg.ncgroups++] = v;
        else if (cfg.nmasks < MAX_ITEMS && !strcmp(a, "--mask")) cfg.masks[cfg.nmasks++] = v;
        else if (cfg.nbinds < MAX_ITEMS && (!strcmp(a, "--bind") || !strcmp(a, "--bind-rw"))) {
            if (i + 1 >= argc)
                die("%s needs SOURCE TARGET", a);
            cfg.binds[cfg.nbinds++] = (struct bind){v, argv[++i], !strcmp(a, "--bind")};
        } else
            die("unknown option %s", a);
    }
    if (!cfg.sbdir || !cfg.nlowers || i >= argc || cfg.lifeline_fd < 0)
        die("usage: sweflow-nsinit --sbdir DIR --lower DIR... --lifeline-fd N -- SHELL ARGS");
    if (!cfg.upper != !cfg.work)
        die("--upper and --work go together");
    cfg.shell_argv = argv + i;
}

/* Written by the keeper, which stays in the parent user namespace: only there may root map the
 * whole id range (so files in the layers keep their owners); a user maps just itself. */
static void map_ids(pid_t child, uid_t uid, gid_t gid) {
    char path[64], map[64];
    if (uid != 0) {
        snprintf(path, sizeof path, "/proc/%d/setgroups", child);
        write_file(path, "deny", 1);
    }
    snprintf(path, sizeof path, "/proc/%d/uid_map", child);
    snprintf(map, sizeof map, uid == 0 ? "0 0 4294967295" : "0 %u 1", uid);
    write_file(path, map, 1);
    snprintf(path, sizeof path, "/proc/%d/gid_map", child);
    snprintf(map, sizeof map, gid == 0 ? "0 0 4294967295" : "0 %u 1", gid);
    write_file(path, map, 1);
}

int main(int argc, char **argv) {
    parse(argc, argv);
    cfg.host_root = getuid() == 0;
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core); /* a crash inside never runs the host's core handler */
    write_file("/proc/self/oom_score_adj", "-1000", 0); /* only root may; fine to fail */
    char pid[32];
    snprintf(pid, sizeof pid, "%d", getpid());
    for (int i = 0; i < cfg.ncgroups; i++) /* before the fork: descendants inherit the cgroups */
        write_file(cfg.cgroups[i], pid, 1);
    int sync[2];
    if (pipe2(sync, O_CLOEXEC) < 0)
        die("pipe");
    /* Always a user namespace, even for root: root inside then has no power over the host
     * (no module loading, no device nodes, no host mounts). */
    long flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |
                 CLONE_NEWCGROUP | SIGCHLD;
    if (!cfg.net)
        flags |= CLONE_NEWNET;
    pid_t init = (pid_t)syscall(SYS_clone, flags, 0, NULL, NULL, 0);
    if (init < 0)
        die("clone(user|mount|pid|ipc|uts|cgroup|net namespaces): unprivileged user namespaces "
            "may be disabled (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0)");
    if (init == 0) {
        char go;
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the keeper's death is ours: no orphaned sandbox */
        close(sync[1]);
        if (read(sync[0], &go, 1) != 1) /* wait for the id maps */
            exit(125);
        close(sync[0]);
        run_init();
    }
    close(sync[0]);
    map_ids(init, getuid(), getgid());
    if (write(sync[1], "g", 1) != 1)
        die("release init");
    close(sync[1]);
    return run_keeper(init);
}
