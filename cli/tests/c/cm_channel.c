/* An RDMA CM event channel's descriptor, as librdmacm's: readable while events wait on it
 * (a program may poll it before rdma_get_cm_event), not readable once they are taken, and a
 * non-blocking one makes rdma_get_cm_event answer EAGAIN. Prints one "CASE name: result" line
 * per check. Usage: cm_channel ADDR (an address of the NIC, to resolve a route to). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static const char *readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, 0);
	return n < 0 ? strerror(errno) : n == 1 ? "readable" : "not readable";
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *channel = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *event;
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7479) };

	if (argc != 2 || !channel || inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1)
		return 2;
	printf("CASE fresh channel: %s\n", readable(channel->fd));
	if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP))
		return 3;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		return 4;
	printf("CASE after resolve_addr: %s\n", readable(channel->fd));
	if (rdma_get_cm_event(channel, &event))
		return 5;
	printf("CASE event: %s\n", rdma_event_str(event->event));
	rdma_ack_cm_event(event);
	printf("CASE taken: %s\n", readable(channel->fd));
	fcntl(channel->fd, F_SETFL, fcntl(channel->fd, F_GETFL) | O_NONBLOCK);
	printf("CASE non-blocking get: %s\n",
	       rdma_get_cm_event(channel, &event) ? strerror(errno) : "an event");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(channel);
	return 0;
}
