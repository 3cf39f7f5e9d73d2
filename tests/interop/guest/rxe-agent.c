/*
 * rxe-agent: a Soft-RoCE verbs program that the interop tests drive over TCP, one command a
 * line, one answer a line.  The real tools (ibv_*_pingpong, perftest) only ever do the right
 * thing; the error-path tests need a peer that posts a WRITE with a wrong rkey, a SEND to a QP
 * with no receive, an atomic at an odd address, a datagram with the wrong Q_Key, and that
 * reports the completion status rxe gives it.  The test (cli/tests/interop/errors.rs) holds
 * all the logic; this program only does what it is told on rxe0, and says what happened.
 *
 *   rxe-agent HOST PORT     connect (retrying while refused, at most 240 s) and serve commands
 *
 * Commands (numbers decimal unless 0x-prefixed, GIDs as 32 hex digits):
 *   qp rc GIDX | qp ud GIDX QKEY    a fresh QP (and CQ) replacing the last one; RC stays in INIT,
 *                                   UD goes to RTS.  -> qp QPN PSN RKEY VA GID
 *   rtr QPN PSN GID GIDX MTU TIMEOUT RETRY RNR_RETRY MIN_RNR_TIMER
 *                                   RC: INIT -> RTR -> RTS towards that peer  -> ok
 *   recv N LEN                      post N receives of LEN bytes               -> ok
 *   post OP RKEY VA LEN             OP: write read send sendinv faa cas; one signaled request
 *                                   from the start of the buffer (faa adds 1, cas swaps 0 for 1,
 *                                   sendinv asks the peer to invalidate RKEY)
 *   post ud QPN QKEY GID GIDX LEN FILL   a datagram of LEN bytes of FILL (one byte)
 *                                   -> ok, or err ERRNO when ibv_post_send refuses it
 *   poll MS                         the next completion, waiting at most MS ms
 *                                   -> wc STATUS OPCODE BYTE_LEN, or none
 *   peek OFF LEN                    LEN bytes of the buffer at OFF, in hex    -> mem HEX
 *   state                           the QP's state (ibv_qp_state)             -> state N
 *   destroy                         destroy the QP (its peer then hears nothing) -> ok
 *   quit                            -> bye, and exit 0
 * Any failure of a verb answers `err ERRNO WHAT` and the agent carries on.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE 8192

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char *buf;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_ah *ah;
static FILE *in, *out;

static void answer(const char *fmt, ...)
{
	va_list ap;
	char line[512];

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(out, "%s\n", line);
	fflush(out);
	printf("rxe-agent: -> %s\n", line);
	fflush(stdout);
}

static int fail(const char *what, int err)
{
	answer("err %d %s: %s", err, what, strerror(err));
	return -1;
}

static int parse_gid(const char *hex, union ibv_gid *gid)
{
	if (strlen(hex) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned int byte;

		if (sscanf(hex + 2 * i, "%2x", &byte) != 1)
			return -1;
		gid->raw[i] = byte;
	}
	return 0;
}

static void gid_hex(const union ibv_gid *gid, char *hex)
{
	for (int i = 0; i < 16; i++)
		sprintf(hex + 2 * i, "%02x", gid->raw[i]);
}

static void drop_qp(void)
{
	if (ah)
		ibv_destroy_ah(ah);
	ah = NULL;
	if (qp)
		ibv_destroy_qp(qp);
	qp = NULL;
	if (cq)
		ibv_destroy_cq(cq);
	cq = NULL;
}

static int cmd_qp(const char *type, int gidx, long qkey)
{
	int ud = strcmp(type, "ud") == 0;
	struct ibv_qp_init_attr init = {
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
	};
	union ibv_gid gid;
	char hex[33];
	int err;

	drop_qp();
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	if (!cq)
		return fail("ibv_create_cq", errno);
	init.send_cq = init.recv_cq = cq;
	qp = ibv_create_qp(pd, &init);
	if (!qp)
		return fail("ibv_create_qp", errno);
	if (ud) {
		attr.qkey = qkey;
		err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	} else {
		attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_REMOTE_ATOMIC;
		err = ibv_modify_qp(qp, &attr,
				    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	}
	if (err)
		return fail("modify to INIT", err);
	if (ud) {
		memset(&attr, 0, sizeof(attr));
		attr.qp_state = IBV_QPS_RTR;
		if ((err = ibv_modify_qp(qp, &attr, IBV_QP_STATE)))
			return fail("modify to RTR", err);
		attr.qp_state = IBV_QPS_RTS;
		attr.sq_psn = 0;
		if ((err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN)))
			return fail("modify to RTS", err);
	}
	if ((err = ibv_query_gid(ctx, 1, gidx, &gid)))
		return fail("ibv_query_gid", err);
	gid_hex(&gid, hex);
	/* A PSN of the QP number's making: different for every QP, and reproducible. */
	answer("qp %u %u %u %llu %s", qp->qp_num, (qp->qp_num * 2654435761u) & 0xffffff, mr->rkey,
	       (unsigned long long)(uintptr_t)buf, hex);
	return 0;
}

static int cmd_rtr(unsigned dqpn, unsigned psn, const char *hex, int gidx, int mtu, int timeout,
		   int retry, int rnr_retry, int min_rnr_timer)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = dqpn,
		.rq_psn = psn,
		.max_dest_rd_atomic = 16,
		.min_rnr_timer = min_rnr_timer,
		.ah_attr = {
			.is_global = 1,
			.port_num = 1,
			.grh = { .sgid_index = gidx, .hop_limit = 64 },
		},
	};
	int err;

	if (!qp)
		return fail("rtr without a QP", EINVAL);
	if (parse_gid(hex, &attr.ah_attr.grh.dgid))
		return fail("parsing the GID", EINVAL);
	err = ibv_modify_qp(qp, &attr,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (err)
		return fail("modify to RTR", err);
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = (qp->qp_num * 2654435761u) & 0xffffff;
	attr.timeout = timeout;
	attr.retry_cnt = retry;
	attr.rnr_retry = rnr_retry;
	attr.max_rd_atomic = 1;
	err = ibv_modify_qp(qp, &attr,
			    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (err)
		return fail("modify to RTS", err);
	answer("ok");
	return 0;
}

static int cmd_recv(int n, unsigned len)
{
	if (!qp || len > BUF_SIZE)
		return fail("recv", EINVAL);
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		int err = ibv_post_recv(qp, &wr, &bad);

		if (err)
			return fail("ibv_post_recv", err);
	}
	answer("ok");
	return 0;
}

static int post(struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int err = ibv_post_send(qp, wr, &bad);

	if (err) {
		answer("err %d ibv_post_send: %s", err, strerror(err));
		return -1;
	}
	answer("ok");
	return 0;
}

static int cmd_post(char *args)
{
	char op[16];
	long long rkey, va, len;
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .send_flags = IBV_SEND_SIGNALED };

	if (!qp)
		return fail("post without a QP", EINVAL);
	if (sscanf(args, "%15s", op) != 1)
		return fail("post: no operation", EINVAL);
	if (strcmp(op, "ud") == 0) {
		unsigned qpn, fill;
		long qkey;
		char hex[33];
		int gidx;
		struct ibv_ah_attr av = { .is_global = 1, .port_num = 1 };

		if (sscanf(args, "%*s %u %li %32s %d %lli %u", &qpn, &qkey, hex, &gidx, &len, &fill) != 6 ||
		    parse_gid(hex, &av.grh.dgid) || len < 0 || len > BUF_SIZE)
			return fail("post ud: bad arguments", EINVAL);
		av.grh.sgid_index = gidx;
		av.grh.hop_limit = 64;
		if (ah)
			ibv_destroy_ah(ah);
		ah = ibv_create_ah(pd, &av);
		if (!ah)
			return fail("ibv_create_ah", errno);
		memset(buf, fill, len);
		sge.length = len;
		wr.opcode = IBV_WR_SEND;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qpn;
		wr.wr.ud.remote_qkey = qkey;
		return post(&wr);
	}
	if (sscanf(args, "%*s %lli %lli %lli", &rkey, &va, &len) != 3 || len < 0 || len > BUF_SIZE)
		return fail("post: bad arguments", EINVAL);
	sge.length = len;
	if (strcmp(op, "write") == 0) {
		wr.opcode = IBV_WR_RDMA_WRITE;
	} else if (strcmp(op, "read") == 0) {
		wr.opcode = IBV_WR_RDMA_READ;
	} else if (strcmp(op, "send") == 0) {
		wr.opcode = IBV_WR_SEND;
	} else if (strcmp(op, "sendinv") == 0) {
		wr.opcode = IBV_WR_SEND_WITH_INV;
		wr.invalidate_rkey = rkey;
	} else if (strcmp(op, "faa") == 0) {
		wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr.wr.atomic.compare_add = 1;
	} else if (strcmp(op, "cas") == 0) {
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.wr.atomic.compare_add = 0;
		wr.wr.atomic.swap = 1;
	} else {
		return fail("post: unknown operation", EINVAL);
	}
	if (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = va;
		wr.wr.atomic.rkey = rkey;
	} else {
		wr.wr.rdma.remote_addr = va;
		wr.wr.rdma.rkey = rkey;
	}
	return post(&wr);
}

static int cmd_poll(long ms)
{
	struct timespec start, now;
	struct ibv_wc wc;

	if (!cq)
		return fail("poll without a CQ", EINVAL);
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			return fail("ibv_poll_cq", EIO);
		if (n == 1) {
			answer("wc %d %d %u", wc.status, wc.opcode, wc.byte_len);
			return 0;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >= ms) {
			answer("none");
			return 0;
		}
		usleep(1000);
	}
}

static int cmd_peek(unsigned off, unsigned len)
{
	char hex[2 * 64 + 1];

	if (len > 64 || off + len > BUF_SIZE)
		return fail("peek", EINVAL);
	for (unsigned i = 0; i < len; i++)
		sprintf(hex + 2 * i, "%02x", (unsigned char)buf[off + i]);
	hex[2 * len] = 0;
	answer("mem %s", hex);
	return 0;
}

static int cmd_state(void)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int err;

	if (!qp)
		return fail("state without a QP", EINVAL);
	if ((err = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init)))
		return fail("ibv_query_qp", err);
	answer("state %d", attr.qp_state);
	return 0;
}

/* Connects to HOST:PORT, retrying while nothing listens yet (the test's NIC may start later). */
static int dial(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;

	for (int attempt = 0; attempt < 480; attempt++) {
		int fd, err = getaddrinfo(host, port, &hints, &res);

		if (err) {
			fprintf(stderr, "rxe-agent: %s: %s\n", host, gai_strerror(err));
			return -1;
		}
		fd = socket(res->ai_family, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
			freeaddrinfo(res);
			return fd;
		}
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		usleep(500000);
	}
	fprintf(stderr, "rxe-agent: nobody listens at %s port %s\n", host, port);
	return -1;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	char line[512];
	int fd;

	if (argc != 3) {
		fprintf(stderr, "usage: rxe-agent HOST PORT\n");
		return 2;
	}
	list = ibv_get_device_list(NULL);
	if (!list || !list[0]) {
		fprintf(stderr, "rxe-agent: no RDMA device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		return perror("ibv_open_device"), 1;
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		return perror("ibv_alloc_pd"), 1;
	if (posix_memalign((void **)&buf, 4096, BUF_SIZE))
		return 1;
	memset(buf, 0, BUF_SIZE);
	mr = ibv_reg_mr(pd, buf, BUF_SIZE,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		return perror("ibv_reg_mr"), 1;
	fd = dial(argv[1], argv[2]);
	if (fd < 0)
		return 1;
	in = fdopen(fd, "r");
	out = fdopen(dup(fd), "w");
	printf("rxe-agent: connected to %s port %s\n", argv[1], argv[2]);
	fflush(stdout);
	while (fgets(line, sizeof(line), in)) {
		char word[16], type[8], gid[40];
		unsigned a, b, c;
		int gidx, mtu, timeout, retry, rnr, timer;
		long qkey;
		long ms;

		line[strcspn(line, "\r\n")] = 0;
		printf("rxe-agent: <- %s\n", line);
		fflush(stdout);
		if (sscanf(line, "%15s", word) != 1)
			continue;
		if (strcmp(word, "qp") == 0 && sscanf(line, "%*s %7s %d", type, &gidx) == 2) {
			qkey = 0;
			if (strcmp(type, "ud") == 0 && sscanf(line, "%*s %*s %*d %li", &qkey) != 1)
				fail("qp ud: no Q_Key", EINVAL);
			else
				cmd_qp(type, gidx, qkey);
		} else if (strcmp(word, "rtr") == 0 &&
			   sscanf(line, "%*s %u %u %39s %d %d %d %d %d %d", &a, &b, gid, &gidx, &mtu,
				  &timeout, &retry, &rnr, &timer) == 9) {
			cmd_rtr(a, b, gid, gidx, mtu, timeout, retry, rnr, timer);
		} else if (strcmp(word, "recv") == 0 && sscanf(line, "%*s %u %u", &a, &b) == 2) {
			cmd_recv(a, b);
		} else if (strcmp(word, "post") == 0) {
			cmd_post(line + 4);
		} else if (strcmp(word, "poll") == 0 && sscanf(line, "%*s %ld", &ms) == 1) {
			cmd_poll(ms);
		} else if (strcmp(word, "peek") == 0 && sscanf(line, "%*s %u %u", &a, &c) == 2) {
			cmd_peek(a, c);
		} else if (strcmp(word, "state") == 0) {
			cmd_state();
		} else if (strcmp(word, "destroy") == 0) {
			drop_qp();
			answer("ok");
		} else if (strcmp(word, "quit") == 0) {
			answer("bye");
			drop_qp();
			return 0;
		} else {
			fail(line, EINVAL);
		}
	}
	fprintf(stderr, "rxe-agent: the test closed the connection\n");
	return 1;
}
