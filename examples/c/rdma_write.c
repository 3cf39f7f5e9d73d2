/*
 * rdma_write.c - the smallest complete verbs program: register memory, connect a reliable
 * connection (RC) queue pair to a peer, and write into the peer's memory with one RDMA WRITE.
 *
 *   server:  rdma_write [-d DEVICE] [-g GID_INDEX] [-p PORT]
 *   client:  rdma_write [-d DEVICE] [-g GID_INDEX] [-p PORT] [-w] SERVER_IP
 *
 * The two sides swap what the other needs over TCP (QP number, first packet sequence number,
 * GID, and for the client the server buffer's address and key), move their QPs
 * RESET -> INIT -> RTR -> RTS, then the client posts one RDMA WRITE. The server's CPU takes
 * no part in it: the NIC places the bytes straight into the server's registered buffer.
 * With -w the client waits for Enter before writing (stop the server with SIGSTOP first, and
 * watch its buffer change anyway).
 *
 * Build: gcc -o rdma_write rdma_write.c -libverbs
 * On an emulated NIC: roce run --nic nic1 -- ./rdma_write
 *                     roce run --nic nic0 -- ./rdma_write 10.0.0.2
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define MESSAGE "written by the client with one RDMA WRITE"
#define BUF_SIZE 4096

/* What each side tells the other. */
struct endpoint {
	uint32_t qpn;
	uint32_t psn;
	uint8_t gid[16];
	uint64_t addr; /* the server's buffer */
	uint32_t rkey;
};

static int die(const char *what)
{
	/* libibverbs reports errors in errno (verbs returning a pointer) or as the return value
	 * (verbs returning int, stored in errno by the caller below). */
	fprintf(stderr, "rdma_write: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The out-of-band channel: a TCP connection to the peer. */
static int tcp_channel(const char *server, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
	int fd, conn, one = 1;

	if (!server)
		hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(server, port, &hints, &res))
		die("getaddrinfo");
	fd = socket(res->ai_family, res->ai_socktype, 0);
	if (fd < 0)
		die("socket");
	if (server) {
		if (connect(fd, res->ai_addr, res->ai_addrlen))
			die("connect");
		conn = fd;
	} else {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1))
			die("listen");
		conn = accept(fd, NULL, NULL);
		if (conn < 0)
			die("accept");
		close(fd);
	}
	freeaddrinfo(res);
	return conn;
}

static void exchange(int fd, const struct endpoint *mine, struct endpoint *theirs)
{
	if (write(fd, mine, sizeof(*mine)) != sizeof(*mine))
		die("send endpoint");
	size_t got = 0;
	while (got < sizeof(*theirs)) {
		ssize_t n = read(fd, (char *)theirs + got, sizeof(*theirs) - got);
		if (n <= 0)
			die("receive endpoint");
		got += n;
	}
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, const char *to)
{
	int err = ibv_modify_qp(qp, attr, mask);

	if (err) {
		errno = err;
		die(to);
	}
}

int main(int argc, char *argv[])
{
	const char *dev_name = NULL, *port = "18515";
	int gid_index = 1, wait_enter = 0, opt;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "d:g:p:w")) != -1) {
		switch (opt) {
		case 'd': dev_name = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 'p': port = optarg; break;
		case 'w': wait_enter = 1; break;
		default:
			fprintf(stderr, "usage: %s [-d dev] [-g gid_index] [-p port] [-w] [server]\n",
				argv[0]);
			return 2;
		}
	}
	const char *server = optind < argc ? argv[optind] : NULL;

	/* 1. Open the device. */
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0) {
		fprintf(stderr, "rdma_write: no RDMA device\n");
		return 1;
	}
	struct ibv_device *dev = list[0];
	for (int i = 0; dev_name && i < num; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			dev = list[i];
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		die("ibv_open_device");
	ibv_free_device_list(list);

	/* 2. A protection domain, and ordinary memory registered in it. The buffer need not be
	 * page-aligned: malloc's is not. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	char *buf = malloc(BUF_SIZE);
	if (!buf)
		die("malloc");
	memset(buf, 0, BUF_SIZE);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF_SIZE,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr");

	/* 3. A completion queue and an RC queue pair. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp)
		die("ibv_create_qp");

	/* 4. Tell the peer who we are; learn who it is. */
	struct endpoint mine = { .qpn = qp->qp_num, .psn = lrand48() & 0xffffff,
				 .addr = (uintptr_t)buf, .rkey = mr->rkey }, theirs;
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gid_index, &gid))
		die("ibv_query_gid");
	memcpy(mine.gid, gid.raw, 16);
	int fd = tcp_channel(server, port);
	exchange(fd, &mine, &theirs);

	/* 5. RESET -> INIT -> RTR -> RTS. On RoCE the address is a GID: is_global must be set. */
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				    .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	modify(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
	       "modify to INIT");
	attr = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = theirs.qpn,
		.rq_psn = theirs.psn, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .sgid_index = gid_index, .hop_limit = 64 } },
	};
	memcpy(attr.ah_attr.grh.dgid.raw, theirs.gid, 16);
	modify(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	       "modify to RTR");
	attr = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = mine.psn, .timeout = 14,
				     .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
	modify(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
	       "modify to RTS");

	char done;
	if (!server) {
		/* The server does nothing more: its CPU is not needed for the write. */
		printf("server %d ready: buffer %p rkey 0x%x\n", (int)getpid(), (void *)buf,
		       mr->rkey);
		if (read(fd, &done, 1) != 1)
			die("wait for the client");
		printf("server received: %s\n", buf);
	} else {
		if (wait_enter) {
			printf("client ready: press Enter to write\n");
			getchar();
		}
		/* 6. One RDMA WRITE from our buffer into the server's, and its completion. */
		strcpy(buf, MESSAGE);
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof(MESSAGE),
				       .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = theirs.addr,
						       .rkey = theirs.rkey } },
			*bad;
		int err = ibv_post_send(qp, &wr, &bad);
		if (err) {
			errno = err;
			die("ibv_post_send");
		}
		struct ibv_wc wc;
		int n;
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
			;
		if (n < 0 || wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "rdma_write: completion: %s\n", ibv_wc_status_str(wc.status));
			return 1;
		}
		printf("client wrote %zu bytes\n", sizeof(MESSAGE));
		done = 1;
		if (write(fd, &done, 1) != 1)
			die("tell the server");
	}

	/* 7. Everything is destroyed in the reverse order of creation. */
	close(fd);
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd) ||
	    ibv_close_device(ctx))
		die("teardown");
	free(buf);
	return 0;
}
