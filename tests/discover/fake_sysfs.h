/* fake_sysfs: builds a throw-away sysfs tree for discovery tests: PCI functions under
 * devices/ with bus/pci/devices links, and class/infiniband devices whose `device`
 * link points at them, laid out as the kernel lays out /sys. */
#ifndef ATOLL_TEST_FAKE_SYSFS_H
#define ATOLL_TEST_FAKE_SYSFS_H

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fs_die(const char *what, const char *path)
{
    fprintf(stderr, "fake sysfs: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

static void fs_mkdirs(const char *path)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) && errno != EEXIST) fs_die("mkdir", p);
            *s = '/';
        }
    if (mkdir(p, 0755) && errno != EEXIST) fs_die("mkdir", p);
}

static void fs_write(const char *root, const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    if (!f) fs_die("create", p);
    fputs(text, f);
    fclose(f);
}

static void fs_link(const char *root, const char *rel, const char *target)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    if (symlink(target, p)) fs_die("symlink", p);
}

/* A temp directory to hold the tree. */
static void fs_root(char *out, size_t len, const char *tag)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, len, "%s/%s_XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    if (!mkdtemp(out)) fs_die("mkdtemp", out);
}

/* A PCI function at devices/<path> (its last component is the bus id). */
static void fs_pci(const char *root, const char *path)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/devices/%s", root, path);
    fs_mkdirs(p);
    snprintf(p, sizeof p, "%s/bus/pci/devices", root);
    fs_mkdirs(p);
    const char *bus = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char rel[256], target[1024];
    snprintf(rel, sizeof rel, "bus/pci/devices/%s", bus);
    snprintf(target, sizeof target, "../../../devices/%s", path);
    fs_link(root, rel, target);
}

/* An RDMA device; pci_path NULL makes a software device with no `device` link. */
static void fs_ib(const char *root, const char *name, const char *pci_path, const char *rate, const char *layer)
{
    char p[1024], rel[256];
    snprintf(p, sizeof p, "%s/class/infiniband/%s/ports/1", root, name);
    fs_mkdirs(p);
    snprintf(rel, sizeof rel, "class/infiniband/%s/ports/1/rate", name);
    if (rate) fs_write(root, rel, rate);
    snprintf(rel, sizeof rel, "class/infiniband/%s/ports/1/link_layer", name);
    if (layer) fs_write(root, rel, layer);
    if (pci_path) {
        char target[1024];
        fs_pci(root, pci_path);
        snprintf(rel, sizeof rel, "class/infiniband/%s/device", name);
        snprintf(target, sizeof target, "../../../devices/%s", pci_path);
        fs_link(root, rel, target);
    }
}

static int fs_rm1(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}

static void fs_remove(const char *root) { nftw(root, fs_rm1, 16, FTW_DEPTH | FTW_PHYS); }

#endif
