/* What relay.c and uring.c share: the sockets they open. `flags` is 0 or SOCK_NONBLOCK (then a TCP
 * connect may still be in progress when it returns). Included by both, not built on its own. */
#ifndef FLOOR_SOCKETS_H
#define FLOOR_SOCKETS_H
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

static void die(const char *what) {
  perror(what);
  exit(1);
}

/* A TCP socket with TCP_NODELAY. */
static int tcp(int flags) {
  int fd = socket(AF_INET, SOCK_STREAM | flags, 0), one = 1;
  if (fd < 0) die("socket");
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/* A new connection to the server: SERVER as main was given it, a port of 127.0.0.1 or the path of
 * a Unix socket. */
static int to_server(const char *server, int flags) {
  if (server[0] == '/') {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, server, sizeof a.sun_path - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | flags, 0);
    if (fd < 0) die("socket");
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    return fd;
  }
  int fd = tcp(flags);
  struct sockaddr_in a = loopback(atoi(server));
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) die("connect");
  return fd;
}
#endif
