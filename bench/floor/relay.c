/* The least a proxy must do to move PostgreSQL's bytes: one thread, an edge-triggered epoll set,
 * each client connection paired with a server connection of its own (no pooling, no parsing),
 * every readable byte read with recv and written on with send. Not pgcorral: a yardstick for
 * bench/breakdown.sh, whose kernel work per transaction is the floor a pooler is held against.
 *
 *   cc -O2 -o relay relay.c && ./relay LISTEN_PORT SERVER
 *
 * Clients over TCP on 127.0.0.1; the server at SERVER: a port of 127.0.0.1, or the path of a
 * Unix socket (PostgreSQL's .s.PGSQL.PORT). A write that would block is kept and finished when the
 * socket is writable again (pgbench never has that much in flight).
 *
 * -DBATCH_SENDS (target `relay-batch`: cc -O2 -DBATCH_SENDS -o relay-batch relay.c -luring) is
 * pgcorral's kernel pattern, for a study of where uring.c's saving comes from: reading as above
 * (epoll, one recv per read), but the writes of a loop turn are not sent at once. Their bytes stay
 * in the end's pending buffer (no copy) and the end is staged; when the turn has handled all its
 * events, a turn with one write sends it with a plain send, a turn with two or more queues each as
 * an IORING_OP_SEND (MSG_DONTWAIT | MSG_NOSIGNAL) on a plain io_uring and submits them all in one
 * io_uring_submit that does not wait. MSG_DONTWAIT makes every send complete within that call
 * (a full socket: -EAGAIN or a short count), and the completions are reaped at the start of the
 * next turn from the ring's memory, without a system call: a short one or -EAGAIN keeps the rest
 * pending until EPOLLOUT, an error drops the pair. Pending bytes stay until their completion (or
 * plain send) says they are gone: `pump` still reads nothing into them before. One read per pump
 * (a second waits for the first's send; the loop does not sleep while writes are staged). */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sockets.h"
#ifdef BATCH_SENDS
#include <liburing.h>
#endif

#define BUF 65536

struct end {
  int fd;
  struct end *peer;
  char pending[BUF]; /* bytes read from peer not yet written to fd */
  size_t off, len;
#ifdef BATCH_SENDS
  int busy;   /* pending bytes staged this turn or their send in flight: not sent again meanwhile */
  int unread; /* fd may hold bytes not read yet: read when the peer's pending bytes are gone */
#endif
};

static int ep;

static void watch(struct end *e) {
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP, .data.ptr = e};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, e->fd, &ev) < 0) die("epoll_ctl");
}

static void drop(struct end *e) {
  struct end *p = e->peer;
  close(e->fd);
  close(p->fd);
  e->fd = p->fd = -1; /* freed never: a yardstick runs once */
}

/* Writes what e holds; 0 when all written, 1 when the socket is full, -1 on an error. */
static int flush(struct end *e) {
  while (e->off < e->len) {
    ssize_t n = send(e->fd, e->pending + e->off, e->len - e->off, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN ? 1 : -1;
    e->off += n;
  }
  e->off = e->len = 0;
  return 0;
}

#ifdef BATCH_SENDS
#define ENTRIES 4096
static struct io_uring ring;
static struct end **staged; /* the ends with a write this turn */
static int nstaged, cap;

/* e's pending bytes into this turn's writes. */
static void stage(struct end *e) {
  if (nstaged == cap) {
    cap = cap ? 2 * cap : 256;
    if (!(staged = realloc(staged, cap * sizeof *staged))) die("realloc");
  }
  e->busy = 1;
  staged[nstaged++] = e;
}
#endif

/* Moves what `from` can read to its peer, while the peer has room. */
static void pump(struct end *from) {
  struct end *to = from->peer;
  for (;;) {
#ifdef BATCH_SENDS
    if (to->len) { /* until its send is done (or EPOLLOUT on `to`) */
      from->unread = 1;
      return;
    }
#else
    if (to->len) return; /* wait for EPOLLOUT on `to` */
#endif
    ssize_t n = recv(from->fd, to->pending, BUF, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN)) {
      drop(from);
      return;
    }
#ifdef BATCH_SENDS
    from->unread = n == BUF; /* a short read emptied the socket */
    if (n > 0) {
      to->len = n;
      stage(to);
    }
    return;
#endif
    if (n < 0) return;
    to->len = n;
    int r = flush(to);
    if (r < 0) {
      drop(from);
      return;
    }
    if (r > 0 || n < BUF) return; /* a short read emptied the socket */
  }
}

#ifdef BATCH_SENDS
/* The turn's writes to the kernel: a plain send for one, one submission for more. */
static void end_turn(void) {
  int live = 0;
  for (int i = 0; i < nstaged; i++) {
    struct end *e = staged[i];
    if (e->fd >= 0) staged[live++] = e;
    else e->busy = 0; /* dropped during the turn */
  }
  nstaged = 0;
  if (live == 1) {
    struct end *e = staged[0];
    e->busy = 0;
    int r = flush(e);
    if (r < 0) drop(e);
    else if (r == 0 && e->peer->unread) pump(e->peer); /* staged for the next turn */
    return;
  }
  if (!live) return;
  for (int i = 0; i < live; i++) {
    struct end *e = staged[i];
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (!s) { /* more than ENTRIES writes in one turn */
      io_uring_submit(&ring);
      if (!(s = io_uring_get_sqe(&ring))) die("io_uring_get_sqe");
    }
    io_uring_prep_send(s, e->fd, e->pending + e->off, e->len - e->off,
                       MSG_DONTWAIT | MSG_NOSIGNAL);
    io_uring_sqe_set_data(s, e);
  }
  int r = io_uring_submit(&ring); /* no waiting: every send completes within it */
  if (r < 0) {
    errno = -r;
    die("io_uring_submit");
  }
}

/* The completions of the last submission (in the ring's memory: no system call). */
static void reap(void) {
  unsigned head, n = 0;
  struct io_uring_cqe *c;
  io_uring_for_each_cqe(&ring, head, c) {
    struct end *e = io_uring_cqe_get_data(c);
    n++;
    e->busy = 0;
    if (e->fd < 0) continue;
    if (c->res < 0 && c->res != -EAGAIN) {
      drop(e);
      continue;
    }
    if (c->res > 0) e->off += c->res;
    if (e->off < e->len) continue; /* the socket is full: the rest on EPOLLOUT */
    e->off = e->len = 0;
    if (e->peer->unread) pump(e->peer);
  }
  io_uring_cq_advance(&ring, n);
}
#endif

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: relay LISTEN_PORT SERVER\n");
    return 2;
  }
  int one = 1;
  int lfd = tcp(SOCK_NONBLOCK);
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in la = loopback(atoi(argv[1]));
  if (bind(lfd, (struct sockaddr *)&la, sizeof la) < 0 || listen(lfd, 1024) < 0) die("listen");
  ep = epoll_create1(0);
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
  struct epoll_event evs[256];
#ifdef BATCH_SENDS
  int r = io_uring_queue_init(ENTRIES, &ring, 0);
  if (r < 0) {
    errno = -r;
    die("io_uring_queue_init");
  }
#endif
  for (;;) {
#ifdef BATCH_SENDS
    reap();
    int n = epoll_wait(ep, evs, 256, nstaged ? 0 : -1); /* staged writes: no sleeping */
#else
    int n = epoll_wait(ep, evs, 256, -1);
#endif
    for (int i = 0; i < n; i++) {
      struct end *e = evs[i].data.ptr;
      if (!e) {
        int c;
        while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          /* Bytes sent before the connection is up wait for its EPOLLOUT. */
          int s = to_server(argv[2], SOCK_NONBLOCK);
          struct end *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
          a->fd = c;
          b->fd = s;
          a->peer = b;
          b->peer = a;
          watch(a);
          watch(b);
        }
        continue;
      }
      if (e->fd < 0) continue;
#ifdef BATCH_SENDS
      if (evs[i].events & EPOLLOUT && e->len && !e->busy) stage(e); /* the rest of a short one */
#else
      if (evs[i].events & EPOLLOUT && e->len) {
        if (flush(e) < 0) {
          drop(e);
          continue;
        }
        if (!e->len) pump(e->peer);
      }
#endif
      if (e->fd >= 0 && evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) pump(e);
    }
#ifdef BATCH_SENDS
    end_turn();
#endif
  }
}
