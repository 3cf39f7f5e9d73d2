/*
 * Bad use of the verbs API from C, one case per line of output: each must give the error
 * libibverbs gives (NULL and errno, an errno return, or a completion status), never a crash.
 * RC QPs of the first two devices are connected to each other (GID 1 of each).
 * Prints "CASE what: result" lines; cli/tests/libverbs.rs checks them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* One device's objects. */
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	union ibv_gid gid;
};

static struct side one, two;

static void report(const char *what, int err)
{
	printf("CASE %s: %s\n", what, err ? strerror(err) : "ok");
}

static struct ibv_qp *rc_qp(struct side *s)
{
	struct ibv_qp_init_attr init = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	return ibv_create_qp(s->pd, &init);
}

static int open_side(struct ibv_device *dev, struct side *s)
{
	s->ctx = ibv_open_device(dev);
	s->pd = s->ctx ? ibv_alloc_pd(s->ctx) : NULL;
	s->cq = s->pd ? ibv_create_cq(s->ctx, 16, NULL, NULL, 0) : NULL;
	return !s->cq || ibv_query_gid(s->ctx, 1, 1, &s->gid);
}

static int connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS);
	if (err)
		return err;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				  .dest_qp_num = dest, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
				  .ah_attr = { .is_global = 1, .port_num = 1,
					       .grh = { .dgid = *gid, .sgid_index = 1, .hop_limit = 64 } } };
	err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					    IBV_QP_MIN_RNR_TIMER);
	if (err)
		return err;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = 7, .max_rd_atomic = 1 };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_MAX_QP_RD_ATOMIC);
}

/* One signaled RDMA WRITE from `one` and the status of its completion. */
static const char *write_status(struct ibv_qp *qp, void *src, uint32_t lkey, uint64_t dst,
				uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = dst, .rkey = rkey } }, *bad;
	int err = ibv_post_send(qp, &wr, &bad);
	if (err)
		return strerror(err);
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(one.cq, 1, &wc)) == 0)
		;
	return n < 0 ? "poll failed" : ibv_wc_status_str(wc.status);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 2 || open_side(list[0], &one) || open_side(list[1], &two)) {
		fprintf(stderr, "bad_use: needs two devices\n");
		return 1;
	}
	long page = sysconf(_SC_PAGESIZE);

	/* Memory that is not mapped: EFAULT, as the kernel's get_user_pages says. */
	char *gone = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, page);
	struct ibv_mr *mr = ibv_reg_mr(one.pd, gone, page, IBV_ACCESS_LOCAL_WRITE);
	report("reg_mr of unmapped memory", mr ? 0 : errno);

	/* Remote write without local write: EINVAL. */
	char *buf = malloc(8192), *peer = malloc(8192);
	memset(buf, 'a', 8192);
	memset(peer, 'p', 8192);
	mr = ibv_reg_mr(one.pd, buf, 8192, IBV_ACCESS_REMOTE_WRITE);
	report("reg_mr remote write without local write", mr ? 0 : errno);

	/* RESET -> RTS directly is not a transition. */
	struct ibv_qp *a = rc_qp(&one), *b = rc_qp(&two);
	struct ibv_qp_attr skip = { .qp_state = IBV_QPS_RTS };
	report("modify_qp RESET to RTS", ibv_modify_qp(a, &skip, IBV_QP_STATE));

	/* A PD with a QP still in it cannot go, nor a CQ a QP still uses: EBUSY. */
	report("dealloc_pd in use", ibv_dealloc_pd(one.pd));
	report("destroy_cq in use", ibv_destroy_cq(one.cq));

	int err = connect_qp(a, b->qp_num, &two.gid);
	if (!err)
		err = connect_qp(b, a->qp_num, &one.gid);
	report("connect", err);

	mr = ibv_reg_mr(one.pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *peer_mr = ibv_reg_mr(two.pd, peer, 8192,
					    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	report("reg_mr of malloc memory", mr && peer_mr ? 0 : errno);

	/* A good write; one with a wrong lkey (local protection error, and the QP goes to the
	 * error state); one with a wrong rkey on a fresh pair (remote access error). */
	printf("CASE write: %s\n", write_status(a, buf, mr->lkey, (uintptr_t)peer, peer_mr->rkey, 64));
	printf("CASE peer buffer: %.5s\n", peer);
	printf("CASE write with a wrong lkey: %s\n",
	       write_status(a, buf, mr->lkey + 1000, (uintptr_t)peer, peer_mr->rkey, 64));
	printf("CASE write on a QP in error: %s\n",
	       write_status(a, buf, mr->lkey, (uintptr_t)peer, peer_mr->rkey, 64));
	struct ibv_qp *c = rc_qp(&one), *d = rc_qp(&two);
	err = connect_qp(c, d->qp_num, &two.gid);
	if (!err)
		err = connect_qp(d, c->qp_num, &one.gid);
	printf("CASE write with a wrong rkey: %s\n",
	       write_status(c, buf, mr->lkey, (uintptr_t)peer, peer_mr->rkey + 1000, 64));

	/* A buffer freed (and unmapped: above malloc's mmap threshold) before ibv_dereg_mr:
	 * the writes into it succeed and land nowhere the program can see. */
	struct ibv_qp *e = rc_qp(&one), *f = rc_qp(&two);
	err = connect_qp(e, f->qp_num, &two.gid);
	if (!err)
		err = connect_qp(f, e->qp_num, &one.gid);
	char *big = malloc(1 << 20);
	memset(big, 'b', 1 << 20);
	struct ibv_mr *big_mr = ibv_reg_mr(two.pd, big, 1 << 20,
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	uint64_t big_addr = (uintptr_t)big;
	free(big);
	printf("CASE write into a freed buffer: %s\n",
	       write_status(e, buf, mr->lkey, big_addr, big_mr->rkey, 64));
	report("dereg_mr of a freed buffer", ibv_dereg_mr(big_mr));

	report("destroy_qp", ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_destroy_qp(c) ||
				     ibv_destroy_qp(d) || ibv_destroy_qp(e) || ibv_destroy_qp(f));
	report("dereg_mr", ibv_dereg_mr(mr) || ibv_dereg_mr(peer_mr));
	report("destroy_cq", ibv_destroy_cq(one.cq) || ibv_destroy_cq(two.cq));
	report("dealloc_pd", ibv_dealloc_pd(one.pd) || ibv_dealloc_pd(two.pd));
	report("close_device", ibv_close_device(one.ctx) || ibv_close_device(two.ctx));
	ibv_free_device_list(list);
	free(buf);
	free(peer);
	return 0;
}
