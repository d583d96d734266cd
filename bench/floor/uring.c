/* relay.c's proxy with every socket operation on one io_uring: the same pairing (each client
 * connection with a server connection of its own, no pooling, no parsing), but no recv, send or
 * epoll_wait system calls. Each turn of the loop makes exactly one io_uring_enter, which submits
 * everything the previous turn queued and waits for at least one completion; then it handles
 * every completion that is there. Not pgcorral: a yardstick for bench/breakdown.sh, beside
 * relay.c, for how much kernel work per transaction one ring saves a proxy.
 *
 *   cc -O2 -o uring uring.c -luring && ./uring LISTEN_PORT SERVER
 *
 * Clients over TCP on 127.0.0.1; the server at SERVER: a port of 127.0.0.1, or the path of a
 * Unix socket (PostgreSQL's .s.PGSQL.PORT). Written against liburing 2.3 (Debian 12).
 * - The ring: 4096 submission entries, 8192 completion entries, IORING_SETUP_SINGLE_ISSUER |
 *   IORING_SETUP_DEFER_TASKRUN (completions are run only when the loop asks for them, in its
 *   one io_uring_enter; COOP_TASKRUN would add nothing). No fallback: without them, exit 1.
 * - Accepting: one multishot accept, armed again when a completion ends it. The server
 *   connection is made then with a blocking connect (loopback: immediate), in the loop's thread;
 *   that, TCP_NODELAY and shutdown and close at the end are the only other system calls, once per
 *   connection, none per message. The ring's fd is registered (io_uring_register_ring_fd).
 * - Reading: a multishot recv on each socket, from one ring of 4096 provided buffers of 16 KiB
 *   shared by all sockets; armed again when a completion ends it. When the buffers have run out
 *   (-ENOBUFS with all of them held), it is armed again once one is given back.
 * - Writing: the received buffer itself is sent to the peer (IORING_OP_SEND, MSG_NOSIGNAL) and
 *   given back to the buffer ring when sent. One send in flight per socket, so that its bytes go
 *   in order; the buffers waiting behind it are chained through their ids (a FIFO per socket);
 *   a short send sends the rest.
 * - Closing: end of file or an error on either socket shuts both down (shutdown(2) ends their
 *   operations in flight); both are closed once neither has an operation in flight. Their structs
 *   are never freed (a yardstick runs once), so no completion can meet a reused one.
 * - user_data: a pointer to the socket's struct (16-byte aligned) or'd with the operation.
 *
 * -DNO_DEFER (target `uring-nodefer`: cc -O2 -DNO_DEFER -o uring-nodefer uring.c -luring) is the
 * same relay on a ring set up without IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
 * (CQSIZE kept; no COOP_TASKRUN either), for a study of what deferred task running brings: the
 * kernel then runs the ring's task work (a socket became readable or writable, a completion to
 * post) as soon as it can, interrupting the loop on its way back to user space, instead of
 * only inside the loop's io_uring_enter. Everything else, one io_uring_enter per turn included,
 * is as above. */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sockets.h"

#define ENTRIES 4096
#define NBUF 4096 /* a power of two */
#define BUFSZ 16384
#define GROUP 0

enum { ACCEPT, RECV, SEND, KINDS = 3 };

struct end {
  int fd;
  struct end *peer;
  int recv_armed, sending, closing, starved;
  int head, tail;           /* ids of the buffers waiting to be sent on fd; -1: none */
  struct end *next_starved; /* in the list of ends waiting for a buffer */
};

static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;                                  /* NBUF buffers of BUFSZ */
static struct { int off, len, next; } chunk[NBUF]; /* what a buffer held by us has left to send */
static int held;                                    /* buffers taken from the ring, not yet back */
static struct end *starved;
static int lfd;
static const char *server;

static void die_ring(const char *what, int r) {
  fprintf(stderr, "uring: %s: %s\n", what, strerror(-r));
  exit(1);
}

/* A submission entry for operation `kind` of e (NULL: the listener), its user_data set (the prep
 * functions leave it). The queue fills only when one turn queues more than ENTRIES operations;
 * then it is submitted early (an extra system call). */
static struct io_uring_sqe *sqe_for(struct end *e, int kind) {
  struct io_uring_sqe *s = io_uring_get_sqe(&ring);
  if (!s) {
    io_uring_submit(&ring);
    if (!(s = io_uring_get_sqe(&ring))) die_ring("no submission entry", -EBUSY);
  }
  io_uring_sqe_set_data64(s, (uint64_t)(uintptr_t)e | kind);
  return s;
}

static void arm_accept(void) {
  struct io_uring_sqe *s = sqe_for(NULL, ACCEPT);
  io_uring_prep_multishot_accept(s, lfd, NULL, NULL, 0);
}

static void arm_recv(struct end *e) {
  struct io_uring_sqe *s = sqe_for(e, RECV);
  io_uring_prep_recv_multishot(s, e->fd, NULL, 0, 0);
  s->flags |= IOSQE_BUFFER_SELECT;
  s->buf_group = GROUP;
  e->recv_armed = 1;
}

/* Sends what is left of the first buffer waiting on e. */
static void send_head(struct end *e) {
  int b = e->head;
  struct io_uring_sqe *s = sqe_for(e, SEND);
  io_uring_prep_send(s, e->fd, bufs + (size_t)b * BUFSZ + chunk[b].off, chunk[b].len - chunk[b].off,
                     MSG_NOSIGNAL);
  e->sending = 1;
}

/* Buffer b back to the kernel's ring; the ends that went without one read again. */
static void give_back(int b) {
  io_uring_buf_ring_add(br, bufs + (size_t)b * BUFSZ, BUFSZ, b, io_uring_buf_ring_mask(NBUF), 0);
  io_uring_buf_ring_advance(br, 1);
  held--;
  while (starved) {
    struct end *e = starved;
    starved = e->next_starved;
    e->starved = 0;
    if (!e->closing) arm_recv(e);
  }
}

/* Gives back every buffer waiting on e (nothing of it in flight). */
static void drop_queue(struct end *e) {
  while (e->head >= 0) {
    int b = e->head;
    e->head = chunk[b].next;
    give_back(b);
  }
  e->tail = -1;
}

static void maybe_close(struct end *e) {
  struct end *p = e->peer;
  if (e->fd < 0 || e->recv_armed || e->sending || p->recv_armed || p->sending) return;
  close(e->fd);
  close(p->fd);
  e->fd = p->fd = -1;
}

/* The end of a pair: no more reading or sending on either socket; closed when all has ended. */
static void drop(struct end *e) {
  struct end *ends[2] = {e, e->peer};
  if (e->closing) return;
  for (int i = 0; i < 2; i++) {
    ends[i]->closing = 1;
    shutdown(ends[i]->fd, SHUT_RDWR); /* ends the multishot recv (and a blocked send) */
    if (!ends[i]->sending) drop_queue(ends[i]);
  }
  maybe_close(e);
}

static void on_accept(struct io_uring_cqe *c) {
  if (!(c->flags & IORING_CQE_F_MORE)) arm_accept();
  if (c->res < 0) return; /* EMFILE and the like: the client is not taken */
  int one = 1;
  setsockopt(c->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct end *a = aligned_alloc(16, sizeof *a), *b = aligned_alloc(16, sizeof *b);
  *a = (struct end){.fd = c->res, .peer = b, .head = -1, .tail = -1};
  *b = (struct end){.fd = to_server(server, 0), .peer = a, .head = -1, .tail = -1};
  arm_recv(a);
  arm_recv(b);
}

static void on_recv(struct end *e, struct io_uring_cqe *c) {
  struct end *to = e->peer;
  if (!(c->flags & IORING_CQE_F_MORE)) e->recv_armed = 0;
  if (c->flags & IORING_CQE_F_BUFFER) {
    int b = c->flags >> IORING_CQE_BUFFER_SHIFT;
    held++;
    if (e->closing || c->res <= 0) {
      give_back(b);
    } else { /* onto the peer's FIFO; sent now when nothing is in flight there */
      chunk[b].off = 0;
      chunk[b].len = c->res;
      chunk[b].next = -1;
      if (to->tail >= 0) chunk[to->tail].next = b;
      else to->head = b;
      to->tail = b;
      if (!to->sending) send_head(to);
    }
  }
  if (c->res == -ENOBUFS && !e->closing) {
    if (e->recv_armed) return;    /* still armed (not seen): nothing to do */
    if (held < NBUF) arm_recv(e); /* some came back since the kernel looked */
    else if (!e->starved) {
      e->starved = 1;
      e->next_starved = starved;
      starved = e;
    }
    return;
  }
  if (c->res <= 0) drop(e);
  else if (!e->recv_armed && !e->closing) arm_recv(e);
  if (e->closing) maybe_close(e);
}

static void on_send(struct end *e, struct io_uring_cqe *c) {
  e->sending = 0;
  if (e->closing) {
    drop_queue(e);
    maybe_close(e);
    return;
  }
  if (c->res <= 0) {
    drop(e);
    return;
  }
  int b = e->head;
  chunk[b].off += c->res;
  if (chunk[b].off == chunk[b].len) {
    e->head = chunk[b].next;
    if (e->head < 0) e->tail = -1;
    give_back(b);
  }
  if (e->head >= 0) send_head(e);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: uring LISTEN_PORT SERVER\n");
    return 2;
  }
  server = argv[2];
  int one = 1;
  lfd = tcp(0);
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in la = loopback(atoi(argv[1]));
  if (bind(lfd, (struct sockaddr *)&la, sizeof la) < 0 || listen(lfd, 1024) < 0) die("listen");

#ifdef NO_DEFER
  struct io_uring_params p = {.flags = IORING_SETUP_CQSIZE, .cq_entries = 2 * ENTRIES};
  int r = io_uring_queue_init_params(ENTRIES, &ring, &p);
  if (r < 0) die_ring("io_uring setup", r);
#else
  struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                                       IORING_SETUP_CQSIZE,
                              .cq_entries = 2 * ENTRIES};
  int r = io_uring_queue_init_params(ENTRIES, &ring, &p);
  if (r < 0) die_ring("io_uring setup with SINGLE_ISSUER | DEFER_TASKRUN (kernel 6.1 or later)", r);
#endif
  io_uring_register_ring_fd(&ring); /* io_uring_enter without a file lookup; optional */

  /* The provided buffers: a ring of NBUF entries (page-aligned) and the memory they point to. */
  br = mmap(NULL, NBUF * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  bufs = mmap(NULL, (size_t)NBUF * BUFSZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
              0);
  if (br == MAP_FAILED || bufs == MAP_FAILED) die("mmap");
  struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)br, .ring_entries = NBUF,
                                 .bgid = GROUP};
  r = io_uring_register_buf_ring(&ring, &reg, 0);
  if (r < 0) die_ring("io_uring_register_buf_ring", r);
  io_uring_buf_ring_init(br);
  held = NBUF;
  for (int b = 0; b < NBUF; b++) give_back(b);

  arm_accept();
  for (;;) {
    r = io_uring_submit_and_wait(&ring, 1); /* the turn's one system call */
    if (r < 0 && r != -EINTR) die_ring("io_uring_submit_and_wait", r);
    unsigned head, n = 0;
    struct io_uring_cqe *c;
    io_uring_for_each_cqe(&ring, head, c) {
      uint64_t d = io_uring_cqe_get_data64(c);
      struct end *e = (struct end *)(uintptr_t)(d & ~(uint64_t)KINDS);
      switch (d & KINDS) {
        case ACCEPT: on_accept(c); break;
        case RECV: on_recv(e, c); break;
        case SEND: on_send(e, c); break;
      }
      n++;
    }
    io_uring_cq_advance(&ring, n);
  }
}
