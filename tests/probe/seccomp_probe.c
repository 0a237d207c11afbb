/* seccomp_probe: one syscall path per run, for tests/tests/e2e_seccomp.rs.
 * Built static at test time (gcc -static -no-pie) and copied into a
 * busybox container. Prints "OK <detail>" and exits 0 when the call
 * succeeded, "DENIED <errno>" and exits 1 when it failed.
 *
 *   socket FAMILY TYPE      socket(2) through the x86_64 syscall
 *   socket32 FAMILY TYPE    socket(2) through int 0x80 (i386 ABI, nr 359)
 *   socketcall32 FAMILY TYPE socketcall(SYS_SOCKET) through int 0x80
 *   socketpair FAMILY       socketpair(FAMILY, SOCK_STREAM)
 *   uring-socket FAMILY TYPE io_uring IORING_OP_SOCKET
 *   keyctl                  keyctl(KEYCTL_GET_KEYRING_ID, session, create)
 */
#include <errno.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static int report(long r, int err)
{
	if (r < 0) {
		printf("DENIED %d %s\n", err, strerror(err));
		return 1;
	}
	printf("OK %ld\n", r);
	return 0;
}

/* The i386 ABI from a 64-bit process: arguments are truncated to 32 bits,
 * so pointers must be below 4 GiB (a static, non-PIE binary's .bss is). */
static long int80(long nr, long a, long b, long c)
{
	long r;
	__asm__ volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
	return r;
}

static unsigned int socketcall_args[3];

static int uring_socket(int family, int type)
{
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	int fd = (int)syscall(__NR_io_uring_setup, 4, &p);
	if (fd < 0)
		return report(-1, errno);
	size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	char *sq = mmap(0, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, IORING_OFF_SQ_RING);
	char *cq = mmap(0, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe),
					 PROT_READ | PROT_WRITE, MAP_SHARED, fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED)
		return report(-1, errno);
	memset(&sqes[0], 0, sizeof sqes[0]);
	sqes[0].opcode = IORING_OP_SOCKET;
	sqes[0].fd = family;
	sqes[0].off = (unsigned)type;
	unsigned *tail = (unsigned *)(sq + p.sq_off.tail);
	unsigned *array = (unsigned *)(sq + p.sq_off.array);
	array[*tail & *(unsigned *)(sq + p.sq_off.ring_mask)] = 0;
	__atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
	long r = syscall(__NR_io_uring_enter, fd, 1, 1, IORING_ENTER_GETEVENTS, 0, 0);
	if (r < 0)
		return report(-1, errno);
	unsigned head = *(unsigned *)(cq + p.cq_off.head);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	int res = cqes[head & *(unsigned *)(cq + p.cq_off.ring_mask)].res;
	return res < 0 ? report(-1, -res) : report(res, 0);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, 0, _IONBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: seccomp_probe CHECK [ARGS]\n");
		return 2;
	}
	const char *what = argv[1];
	int a = argc > 2 ? atoi(argv[2]) : 0;
	int b = argc > 3 ? atoi(argv[3]) : SOCK_STREAM;
	long r;
	if (!strcmp(what, "socket")) {
		r = syscall(SYS_socket, a, b, 0);
		return report(r, errno);
	}
	if (!strcmp(what, "socket32")) {
		r = int80(359, a, b, 0);
		return r < 0 ? report(-1, (int)-r) : report(r, 0);
	}
	if (!strcmp(what, "socketcall32")) {
		socketcall_args[0] = (unsigned)a;
		socketcall_args[1] = (unsigned)b;
		socketcall_args[2] = 0;
		r = int80(102, 1, (long)(unsigned long)socketcall_args, 0);
		return r < 0 ? report(-1, (int)-r) : report(r, 0);
	}
	if (!strcmp(what, "socketpair")) {
		int sv[2];
		r = syscall(SYS_socketpair, a, SOCK_STREAM, 0, sv);
		return report(r, errno);
	}
	if (!strcmp(what, "uring-socket"))
		return uring_socket(a, b);
	if (!strcmp(what, "keyctl")) {
		/* KEYCTL_GET_KEYRING_ID (0) of KEY_SPEC_SESSION_KEYRING (-3), create */
		r = syscall(SYS_keyctl, 0, -3, 1);
		return report(r, errno);
	}
	fprintf(stderr, "unknown check %s\n", what);
	return 2;
}
