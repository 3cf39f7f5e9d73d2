/*
 * Shared receive queues from C, one case per line of output: the calls ibv_srq_pingpong does
 * not make (ibv_create_srq_ex, ibv_query_srq, ibv_modify_srq) and bad use of them, each with
 * the answer libibverbs gives. Prints "CASE what: result" lines; cli/tests/libverbs.rs checks
 * them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

static void report(const char *what, int err)
{
	printf("CASE %s: %s\n", what, err ? strerror(err) : "ok");
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		return 1;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
	if (!cq)
		return 1;
	struct ibv_device_attr dev;
	report("query_device", ibv_query_device(ctx, &dev));
	printf("CASE max_srq nonzero: %s\n", dev.max_srq > 0 && dev.max_srq_wr > 0 ? "yes" : "no");

	/* A basic SRQ through the extended call (the inline function hands it to ibv_create_srq). */
	struct ibv_srq_init_attr_ex ex = {
		.attr = { .max_wr = 100, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE,
		.srq_type = IBV_SRQT_BASIC,
		.pd = pd,
	};
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &ex);
	report("create_srq_ex", srq ? 0 : errno);
	if (!srq)
		return 1;
	printf("CASE granted max_wr at least 100: %s\n", ex.attr.max_wr >= 100 ? "yes" : "no");
	struct ibv_srq_init_attr too_big = { .attr = { .max_wr = 1u << 30, .max_sge = 1 } };
	report("create_srq too large", ibv_create_srq(pd, &too_big) ? 0 : errno);

	struct ibv_srq_attr attr = { .srq_limit = 10 };
	report("modify_srq limit", ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT));
	report("query_srq", ibv_query_srq(srq, &attr));
	printf("CASE limit armed: %u\n", attr.srq_limit);
	attr.max_wr = 200;
	report("modify_srq resize", ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR));
	attr.srq_limit = 1u << 20;
	report("modify_srq limit above size", ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT));

	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	report("create_qp with srq", qp ? 0 : errno);
	if (!qp)
		return 1;
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	report("query_qp", ibv_query_qp(qp, &qattr, 0, &qinit));
	printf("CASE query_qp names the srq: %s\n", qinit.srq == srq ? "yes" : "no");

	char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return 1;
	struct ibv_sge sge[2] = { { (uintptr_t)buf, 32, mr->lkey }, { (uintptr_t)buf + 32, 32, mr->lkey } };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = sge, .num_sge = 1 }, *bad = NULL;
	report("post_srq_recv", ibv_post_srq_recv(srq, &wr, &bad));
	wr.num_sge = 2;
	int err = ibv_post_srq_recv(srq, &wr, &bad);
	report("post_srq_recv two entries", err);
	printf("CASE bad names the request: %s\n", bad == &wr ? "yes" : "no");
	wr.num_sge = 1;
	report("post_recv on a QP with an srq", ibv_post_recv(qp, &wr, &bad));

	report("destroy_srq in use", ibv_destroy_srq(srq));
	report("destroy_qp", ibv_destroy_qp(qp));
	report("dealloc_pd with an srq", ibv_dealloc_pd(pd));
	report("destroy_srq", ibv_destroy_srq(srq));
	report("dereg_mr", ibv_dereg_mr(mr));
	report("destroy_cq", ibv_destroy_cq(cq));
	report("dealloc_pd", ibv_dealloc_pd(pd));
	report("close_device", ibv_close_device(ctx));
	ibv_free_device_list(list);
	return 0;
}
