/*
 * job_tmp.c - a SPANK plugin for the CI's real Slurm: each job a private /tmp and /dev/shm on each
 * node, seen by every step of that job on that node and removed when the job ends, as Slurm's
 * job_container/tmpfs gives a real cluster's jobs. That plugin needs PrologFlags=Contain, which adds
 * an `extern` step to every job (the local Slurm models none); this one has no such step.
 *
 *   plugstack.conf:  required /path/job_tmp.so base=DIR
 *
 * In each task, as root before the task becomes the user (task_init_privileged): a mount
 * namespace of its own, DIR/<hostname>/<jobid>/tmp and .../shm (made once, mode 1777)
 * bind-mounted over /tmp and /dev/shm; the mounts found under the node's /tmp (the paths
 * ci/real-slurm.sh keeps reachable there: the project, pytest's folders) are carried into the
 * job's at the same paths. At the job's end on each node (job_epilog, run by slurmd):
 * DIR/<hostname>/<jobid> removed, without crossing into mounts.
 *
 * Built by ci/real-slurm.sh against each Slurm it starts: SLURM_VERSION_NUMBER is that slurmd's
 * (Slurm loads a plugin only when its major and minor version match). The few SPANK declarations
 * used are written out below (spank.h's, unchanged since SPANK began), so no -dev package is needed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct spank_handle *spank_t;
extern int spank_get_item(spank_t spank, int item, ...);
extern void slurm_error(const char *format, ...);
enum { S_JOB_ID = 2 };  /* spank.h's enum spank_item: S_JOB_UID, S_JOB_GID, S_JOB_ID, ... */

const char plugin_name[] = "job_tmp";
const char plugin_type[] = "spank";
const unsigned int plugin_version = SLURM_VERSION_NUMBER;
const unsigned int spank_plugin_version = 1;

#define MAX_CARRIED 64

/* job_dir: DIR/<hostname>/<jobid> into out; -1 (logged) when an argument or item is missing */
static int job_dir(spank_t sp, int ac, char **av, char *out, size_t len)
{
	const char *base = NULL;
	char host[HOST_NAME_MAX + 1] = "";
	uint32_t job = 0;
	int i;

	for (i = 0; i < ac; i++)
		if (strncmp(av[i], "base=", 5) == 0)
			base = av[i] + 5;
	if (!base) {
		slurm_error("job_tmp: no base=DIR argument in plugstack.conf");
		return -1;
	}
	if (spank_get_item(sp, S_JOB_ID, &job) != 0 || gethostname(host, sizeof(host) - 1) != 0) {
		slurm_error("job_tmp: no job id or hostname");
		return -1;
	}
	if ((size_t) snprintf(out, len, "%s/%s/%u", base, host, job) >= len) {
		slurm_error("job_tmp: path too long under %s", base);
		return -1;
	}
	return 0;
}

/* make_dirs: mkdir -p path: new parent folders with parent_mode, the last one with mode */
static int make_dirs(const char *path, mode_t parent_mode, mode_t mode)
{
	char buf[PATH_MAX];
	char *p;

	if ((size_t) snprintf(buf, sizeof(buf), "%s", path) >= sizeof(buf))
		return -1;
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, parent_mode) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, mode) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* mounts_under_tmp: the mount points strictly under /tmp, none inside an earlier one */
static int mounts_under_tmp(char found[][PATH_MAX], int most)
{
	FILE *info = fopen("/proc/self/mountinfo", "r");
	char line[4 * PATH_MAX], point[PATH_MAX];
	int n = 0, i, inside;

	if (!info)
		return -1;
	while (n < most && fgets(line, sizeof(line), info)) {
		if (sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1)
			continue;
		if (strncmp(point, "/tmp/", 5) != 0 || strchr(point, '\\'))
			continue;  /* not under /tmp, or an escaped name (never one of ours) */
		for (inside = 0, i = 0; i < n && !inside; i++) {
			size_t k = strlen(found[i]);
			inside = strncmp(point, found[i], k) == 0 && (point[k] == '/' || point[k] == '\0');
		}
		if (!inside)
			strcpy(found[n++], point);
	}
	fclose(info);
	return n;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	static char carried[MAX_CARRIED][PATH_MAX];
	char dir[PATH_MAX], tmp[PATH_MAX], shm[PATH_MAX], target[PATH_MAX];
	int n, i;

	if (job_dir(sp, ac, av, dir, sizeof(dir)) != 0)
		return -1;
	/* the folders above tmp and shm 700: what they hold is reached through the job's mounts only */
	if ((size_t) snprintf(tmp, sizeof(tmp), "%s/tmp", dir) >= sizeof(tmp) ||
	    (size_t) snprintf(shm, sizeof(shm), "%s/shm", dir) >= sizeof(shm) ||
	    make_dirs(tmp, 0700, 01777) != 0 || chmod(tmp, 01777) != 0 ||
	    make_dirs(shm, 0700, 01777) != 0 || chmod(shm, 01777) != 0) {
		slurm_error("job_tmp: cannot make %s/tmp and %s/shm: %m", dir, dir);
		return -1;
	}
	if (unshare(CLONE_NEWNS) != 0) {
		slurm_error("job_tmp: no mount namespace of the task's own: %m");
		return -1;
	}
	/* nothing mounted here reaches the node; in a chroot / is no mount point (EINVAL), but the
	 * node's namespace is a slave one already (ci/real-slurm.sh), and so is this copy of it */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0 && errno != EINVAL) {
		slurm_error("job_tmp: cannot make the task's mounts its own: %m");
		return -1;
	}
	n = mounts_under_tmp(carried, MAX_CARRIED);
	for (i = 0; i < n; i++) {
		if ((size_t) snprintf(target, sizeof(target), "%s/%s", tmp, carried[i] + 5) >= sizeof(target) ||
		    make_dirs(target, 0755, 0755) != 0 || mount(carried[i], target, NULL, MS_BIND | MS_REC, NULL) != 0) {
			slurm_error("job_tmp: cannot carry %s into %s: %m", carried[i], tmp);
			return -1;
		}
	}
	if (mount(tmp, "/tmp", NULL, MS_BIND | MS_REC, NULL) != 0 ||
	    mount(shm, "/dev/shm", NULL, MS_BIND, NULL) != 0) {
		slurm_error("job_tmp: cannot mount %s on /tmp and %s on /dev/shm: %m", tmp, shm);
		return -1;
	}
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void) st; (void) flag; (void) ftw;
	if (remove(path) != 0 && errno != ENOENT)
		slurm_error("job_tmp: cannot remove %s: %m", path);
	return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	char dir[PATH_MAX];

	if (job_dir(sp, ac, av, dir, sizeof(dir)) != 0)
		return 0;  /* logged; a node is not drained for a folder left behind */
	if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0 && errno != ENOENT)
		slurm_error("job_tmp: cannot remove %s: %m", dir);
	return 0;
}
