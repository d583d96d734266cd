/* The least a proxy must do to move PostgreSQL's bytes: one thread, an edge-triggered epoll set,
 * each client connection paired with a server connection of its own (no pooling, no parsing),
 * every readable byte read with recv and written on with send. Not pgcorral: a yardstick for
 * bench/breakdown.sh, whose kernel work per transaction is the floor a pooler is held against.
 *
 *   cc -O2 -o relay relay.c && ./relay LISTEN_PORT SERVER
 *
 * Clients over TCP on 127.0.0.1; the server at SERVER: a port of 127.0.0.1, or the path of a
 * Unix socket (PostgreSQL's .s.PGSQL.PORT). A write that would block is kept and finished when the
 * socket is writable again (pgbench never has that much in flight). */
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

#define BUF 65536

struct end {
  int fd;
  struct end *peer;
  char pending[BUF]; /* bytes read from peer not yet written to fd */
  size_t off, len;
};

static int ep;

static void die(const char *what) {
  perror(what);
  exit(1);
}

static int tcp(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  if (fd < 0) die("socket");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/* A new non-blocking connection to the server (SERVER as main was given it). */
static int to_server(const char *server) {
  if (server[0] == '/') {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, server, sizeof a.sun_path - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) die("socket");
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    return fd;
  }
  int fd = tcp();
  struct sockaddr_in a = loopback(atoi(server));
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) die("connect");
  return fd;
}

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

/* Moves what `from` can read to its peer, while the peer has room. */
static void pump(struct end *from) {
  struct end *to = from->peer;
  for (;;) {
    if (to->len) return; /* wait for EPOLLOUT on `to` */
    ssize_t n = recv(from->fd, to->pending, BUF, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN)) {
      drop(from);
      return;
    }
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

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: relay LISTEN_PORT SERVER\n");
    return 2;
  }
  int one = 1;
  int lfd = tcp();
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in la = loopback(atoi(argv[1]));
  if (bind(lfd, (struct sockaddr *)&la, sizeof la) < 0 || listen(lfd, 1024) < 0) die("listen");
  ep = epoll_create1(0);
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev);
  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      struct end *e = evs[i].data.ptr;
      if (!e) {
        int c;
        while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          /* Bytes sent before the connection is up wait for its EPOLLOUT. */
          int s = to_server(argv[2]);
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
      if (evs[i].events & EPOLLOUT && e->len) {
        if (flush(e) < 0) {
          drop(e);
          continue;
        }
        if (!e->len) pump(e->peer);
      }
      if (e->fd >= 0 && evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) pump(e);
    }
  }
}
