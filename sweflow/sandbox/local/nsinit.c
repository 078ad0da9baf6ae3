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
 *
 * Identity: root inside is host uid/gid --uid/--gid, the first of --id-count ids (a subordinate
 * range when the host runs as root; the user itself, alone, when not). Host uid 0 is never mapped,
 * so the sandbox owns nothing of the host's root. A root-run keeper opens every host path itself
 * (open_tree) before the init leaves the host's identity, and shifts the layers and read-only
 * binds onto the sandbox's range with idmapped mounts: files keep their owners inside (disk uid 0
 * is root inside), and what root writes to a disk upper lands as disk uid 0, as in a layer built
 * by the host's root. The host's own root (--host-lower) is never shifted: its root-only files
 * stay root-only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
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
#define TMP_UPPER "rw/upper" /* the tmpfs upper, relative to the state directory */

/* The mount API (5.2+; idmapped mounts 5.12+), spelled out for C libraries that lack it. */
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#define SW_ATTR_RDONLY 0x00000001
#define SW_ATTR_IDMAP 0x00100000
struct sw_mount_attr {
    unsigned long long attr_set, attr_clr, propagation, userns_fd;
};

struct bind {
    const char *src, *dst;
    int ro, fd;
};

struct lower {
    const char *path;
    int host, fd; /* host: the host's own root, never shifted; fd: its tree, opened by the keeper */
};

static struct {
    const char *sbdir, *workdir, *hostname, *upper, *work;
    struct lower lowers[MAX_ITEMS];
    int nlowers;
    const char *cgroups[MAX_ITEMS];
    int ncgroups;
    const char *masks[MAX_ITEMS];
    int nmasks;
    struct bind binds[MAX_ITEMS];
    int nbinds;
    long long upper_size, tmp_size, uid, gid, id_count;
    int net, ctl_fd, lifeline_fd, id_lock_fd, host_root, shift, upper_fd;
    char **shell_argv;
} cfg = {.workdir = "/", .hostname = "sandbox", .ctl_fd = -1, .lifeline_fd = -1,
         .id_lock_fd = -1, .uid = -1, .gid = -1, .id_count = 1, .upper_fd = -1};

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

/* path joined under the merged root, relative to the state directory (init's working directory) */
static const char *in_root(const char *rel) {
    static char buf[8][4096];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "merged%s", rel);
    return buf[i];
}

/* Attach the tree ``fd`` (a detached mount the keeper opened) at the new directory ``dir``:
 * overlayfs takes its layers only from mounts of its own namespace. */
static void attach(int fd, const char *dir) {
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        die("mkdir %s", dir);
    if (syscall(SYS_move_mount, fd, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        die("attach a layer at %s", dir);
    close(fd);
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A copy of the host's ``rel`` in the upper, owned by root inside. */
static void copy_up(const char *lower, const char *upper, const char *rel) {
    char path[4096], buf[65536];
    snprintf(path, sizeof path, "%s%s", lower, rel);
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return;
    snprintf(path, sizeof path, "%s%s", upper, rel);
    int out = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    ssize_t n = out < 0 ? -1 : 0;
    while (n >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, n) != n)
            n = -1;
    if (n < 0)
        die("copy %s", rel);
    close(in);
    close(out);
}

/* With the host's root as a layer, root inside may change none of the host's files or folders
 * (they are not shifted): the mount points of the binds and the workdir are made in the tmpfs
 * upper before the overlay is mounted, where overlayfs merges them with the host's, and the
 * sandbox gets its own /etc/hosts and /etc/resolv.conf (it has its own network), as docker's
 * containers do. */
static void make_points(const char *lower) {
    const char *upper = TMP_UPPER;
    char path[4096];
    mkdir_p(TMP_UPPER "/etc", 0755);
    copy_up(lower, upper, "/etc/hosts");
    copy_up(lower, upper, "/etc/resolv.conf");
    for (int i = 0; i < cfg.nbinds; i++) {
        struct stat st;
        int dir = cfg.binds[i].fd >= 0 && fstat(cfg.binds[i].fd, &st) == 0 && S_ISDIR(st.st_mode);
        snprintf(path, sizeof path, "%s%s", upper, cfg.binds[i].dst);
        char *slash = strrchr(path, '/');
        if (!dir && slash)
            *slash = 0;
        mkdir_p(path, 0755);
    }
    snprintf(path, sizeof path, "%s%s", upper, cfg.workdir);
    mkdir_p(path, 0755);
}

static void mount_overlay(void) {
    char opts[16384];
    const char *upper = cfg.upper, *work = cfg.work;
    char tupper[4096], twork[4096], lowers[MAX_ITEMS][32];
    /* "rw": a tmpfs private to this mount namespace, capped in size: the tmpfs upper, and the
     * directories where the keeper's trees are attached */
    char size[64] = "";
    if (!upper && cfg.upper_size > 0)
        snprintf(size, sizeof size, "size=%lld,", cfg.upper_size);
    char data[128];
    snprintf(data, sizeof data, "%smode=0755", upper ? "size=1m," : size);
    xmount("sweflow-upper", "rw", "tmpfs", MS_NOSUID | MS_NODEV, data);
    if (!upper) {
        mkdir_p(TMP_UPPER, 0755);
        mkdir_p("rw/work", 0755);
        upper = TMP_UPPER;
        work = "rw/work";
    } else if (cfg.upper_fd >= 0) { /* the disk upper's folder, shifted by the keeper */
        attach(cfg.upper_fd, "rw/disk");
        snprintf(tupper, sizeof tupper, "rw/disk/%s", base_name(cfg.upper));
        snprintf(twork, sizeof twork, "rw/disk/%s", base_name(cfg.work));
        upper = tupper;
        work = twork;
    }
    for (int i = 0; i < cfg.nlowers; i++) {
        if (cfg.lowers[i].fd < 0)
            continue;
        snprintf(lowers[i], sizeof lowers[i], "rw/lower-%d", i);
        attach(cfg.lowers[i].fd, lowers[i]);
        cfg.lowers[i].path = lowers[i];
        if (cfg.lowers[i].host && !cfg.upper)
            make_points(lowers[i]);
    }
    int n = snprintf(opts, sizeof opts, "lowerdir=");
    for (int i = cfg.nlowers - 1; i >= 0; i--) /* overlayfs lists the topmost lower first */
        n += snprintf(opts + n, sizeof opts - n, "%s%s", cfg.lowers[i].path, i ? ":" : "");
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
        struct stat st; /* the keeper's tree, if it opened one: init may not reach the path */
        int found = cfg.binds[i].fd >= 0 ? fstat(cfg.binds[i].fd, &st) : stat(cfg.binds[i].src, &st);
        if (found < 0)
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
            struct stat point;
            if (stat(dst, &point) < 0) /* an existing one may be a host file root inside can't open */
                touch(dst);
        }
        if (cfg.binds[i].fd >= 0) { /* opened (and, read-only, shifted) by the keeper */
            if (syscall(SYS_move_mount, cfg.binds[i].fd, "", AT_FDCWD, dst,
                        MOVE_MOUNT_F_EMPTY_PATH) < 0)
                die("bind %s on %s", cfg.binds[i].src, cfg.binds[i].dst);
            close(cfg.binds[i].fd);
        } else {
            xmount(cfg.binds[i].src, dst, NULL, MS_BIND | MS_REC, NULL);
        }
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
    /* The kernel-global files of /proc: read-only, as docker does (they check only the file
     * mode, and some are the host's own). The shell cannot undo it (it has no CAP_SYS_ADMIN). */
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
    if (cfg.id_lock_fd >= 0)
        close(cfg.id_lock_fd); /* the keeper holds the range until the whole sandbox is gone */
    /* Root-run: /proc/1/exe, /proc/1/fd... would lead a process inside to host files (the init
     * binary, the control pipe). Non-dumpable, they need CAP_SYS_PTRACE in the host's
     * namespace. (A user-run host reads /proc/<init>/root itself, so there init stays
     * dumpable; its uid 0 inside is only that user.) */
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
        else if (!strcmp(a, "--uid")) cfg.uid = num(v, a);
        else if (!strcmp(a, "--gid")) cfg.gid = num(v, a);
        else if (!strcmp(a, "--id-count")) cfg.id_count = num(v, a);
        else if (!strcmp(a, "--id-lock-fd")) cfg.id_lock_fd = (int)num(v, a);
        else if (cfg.nlowers < MAX_ITEMS && (!strcmp(a, "--lower") || !strcmp(a, "--host-lower")))
            cfg.lowers[cfg.nlowers++] = (struct lower){v, !strcmp(a, "--host-lower"), -1};
        else if (cfg.ncgroups < MAX_ITEMS && !strcmp(a, "--cgroup")) cfg.cgroups[cfg.ncgroups++] = v;
        else if (cfg.nmasks < MAX_ITEMS && !strcmp(a, "--mask")) cfg.masks[cfg.nmasks++] = v;
        else if (cfg.nbinds < MAX_ITEMS && (!strcmp(a, "--bind") || !strcmp(a, "--bind-rw"))) {
            if (i + 1 >= argc)
                die("%s needs SOURCE TARGET", a);
            cfg.binds[cfg.nbinds++] = (struct bind){v, argv[++i], !strcmp(a, "--bind"), -1};
        } else
            die("unknown option %s", a);
    }
    if (!cfg.sbdir || !cfg.nlowers || i >= argc || cfg.lifeline_fd < 0)
        die("usage: sweflow-nsinit --sbdir DIR --lower DIR... --lifeline-fd N -- SHELL ARGS");
    if (!cfg.upper != !cfg.work)
        die("--upper and --work go together");
    if (cfg.uid < 0 || cfg.gid < 0 || cfg.id_count < 1)
        die("--uid, --gid and --id-count name the host ids of root inside");
    cfg.shell_argv = argv + i;
}

/* Written by the keeper, which stays in the parent user namespace: root maps the sandbox's
 * range (never host uid 0); a user maps just itself. */
static void map_ids(pid_t child) {
    char path[64], map[96];
    if (!cfg.shift) { /* an unprivileged writer may map only itself, and without setgroups */
        snprintf(path, sizeof path, "/proc/%d/setgroups", child);
        write_file(path, "deny", 1);
    }
    snprintf(path, sizeof path, "/proc/%d/uid_map", child);
    snprintf(map, sizeof map, "0 %lld %lld", cfg.uid, cfg.id_count);
    write_file(path, map, 1);
    snprintf(path, sizeof path, "/proc/%d/gid_map", child);
    snprintf(map, sizeof map, "0 %lld %lld", cfg.gid, cfg.id_count);
    write_file(path, map, 1);
}

static int open_tree_of(const char *path, unsigned int flags) {
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | flags);
    if (fd < 0)
        die("open_tree %s (the mount API needs Linux 5.2+)", path);
    return fd;
}

/* Before the clone, with the host's identity: every host path the sandbox is made of becomes a
 * detached mount (a non-recursive one for layers: overlayfs in a user namespace refuses a layer
 * with mounts below it, and the host's / always has some). */
static void open_trees(void) {
    for (int i = 0; i < cfg.nlowers; i++)
        cfg.lowers[i].fd = open_tree_of(cfg.lowers[i].path, 0);
    if (cfg.upper) { /* upper and work sit side by side: overlayfs wants them on one mount */
        char parent[4096];
        snprintf(parent, sizeof parent, "%s", cfg.upper);
        char *slash = strrchr(parent, '/');
        size_t len = slash ? (size_t)(slash - parent) : 0;
        if (!slash || strncmp(cfg.work, parent, len) || strchr(cfg.work + len + 1, '/'))
            die("--work %s must sit beside --upper %s", cfg.work, cfg.upper);
        *slash = 0;
        cfg.upper_fd = open_tree_of(len ? parent : "/", 0);
    }
    for (int i = 0; i < cfg.nbinds; i++)
        cfg.binds[i].fd = open_tree_of(cfg.binds[i].src, AT_RECURSIVE);
}

static void set_attr(int fd, const char *what, unsigned long long set, int userns, unsigned flags) {
    struct sw_mount_attr attr = {.attr_set = set, .userns_fd = (unsigned long long)userns};
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | flags, &attr, sizeof attr) < 0)
        die("idmapped mount of %s (needs Linux 5.19+ and a filesystem that supports them)", what);
}

/* After the id maps: shift layers, the disk upper and read-only binds onto the sandbox's range
 * (disk id N is host id uid+N, i.e. N inside). Read-write binds are not shifted: the sandbox
 * writes there as its own host identity, so nothing it leaves can be a file of the host's root
 * (no set-uid root program planted in a host folder). */
static void shift_trees(pid_t child) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/user", child);
    int userns = open(path, O_RDONLY | O_CLOEXEC);
    if (userns < 0)
        die("open %s", path);
    for (int i = 0; i < cfg.nlowers; i++) {
        if (cfg.lowers[i].host)
            set_attr(cfg.lowers[i].fd, cfg.lowers[i].path, SW_ATTR_RDONLY, -1, 0);
        else
            set_attr(cfg.lowers[i].fd, cfg.lowers[i].path, SW_ATTR_IDMAP | SW_ATTR_RDONLY, userns, 0);
        close(cfg.lowers[i].fd);
    }
    if (cfg.upper_fd >= 0) {
        set_attr(cfg.upper_fd, cfg.upper, SW_ATTR_IDMAP, userns, 0);
        close(cfg.upper_fd);
    }
    for (int i = 0; i < cfg.nbinds; i++) {
        if (cfg.binds[i].ro)
            set_attr(cfg.binds[i].fd, cfg.binds[i].src, SW_ATTR_IDMAP | SW_ATTR_RDONLY, userns,
                     AT_RECURSIVE);
        close(cfg.binds[i].fd);
    }
    close(userns);
}

/* Init leaves the host's identity for root of its range: no host group either (setgroups). */
static void become_root(void) {
    if (cfg.shift && setgroups(0, NULL) < 0)
        die("setgroups");
    if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
        die("become root of the sandbox's id range");
}

int main(int argc, char **argv) {
    parse(argc, argv);
    cfg.host_root = getuid() == 0;
    cfg.shift = cfg.uid != getuid(); /* a range of its own, set by a root-run host */
    if (cfg.shift && !cfg.host_root)
        die("only root may map a sandbox onto another host identity (--uid %lld)", cfg.uid);
    if (cfg.id_lock_fd >= 0)
        fcntl(cfg.id_lock_fd, F_SETFD, FD_CLOEXEC);
    if (cfg.shift)
        open_trees();
    /* Init starts in the state directory, as the clone translates the working directory into
     * the new mount namespace: its host path may pass through folders root inside cannot
     * search, so init reaches everything there by relative paths. */
    if (chdir(cfg.sbdir) < 0)
        die("chdir to %s", cfg.sbdir);
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
        close(sync[1]);
        if (read(sync[0], &go, 1) != 1) /* wait for the id maps */
            exit(125);
        become_root();
        /* the keeper's death is ours: no orphaned sandbox (set after become_root, as a change
         * of credentials clears it; the keeper holds its end of the pipe until it exits) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        struct pollfd keeper = {.fd = sync[0], .events = POLLIN};
        if (poll(&keeper, 1, 0) > 0 && (keeper.revents & POLLHUP))
            exit(125); /* it died before */
        close(sync[0]);
        run_init();
    }
    close(sync[0]);
    map_ids(init);
    if (cfg.shift)
        shift_trees(init);
    if (write(sync[1], "g", 1) != 1)
        die("release init");
    return run_keeper(init);
}
