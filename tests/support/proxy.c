/* proxy.c -- A TCP proxy on loopback that a test can cut and restore: one relay's database link fails while the server and the other relays go on. */
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_LINKS 64

struct link {
        int a, b; /* client side, server side; -1 when closed */
        pthread_t thread;
        bool used;
};

struct ts_proxy {
        int listen_fd, port, target_port;
        pthread_t acceptor;
        pthread_mutex_t lock;
        bool cut, stopping;
        int accepted;
        struct link links[MAX_LINKS];
};

/* Closes with a reset (SO_LINGER 0): the peer sees the connection torn, as after a network
 * fault, not a polite end. */
static void reset_close(int fd) {
        struct linger l = { .l_onoff = 1, .l_linger = 0 };

        if (fd < 0)
                return;
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        close(fd);
}

static int connect_target(int port) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0)
                return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

struct pump_arg {
        struct ts_proxy *p;
        struct link *l;
};

/* Copies bytes both ways until either side ends or the link is cut (its fds shut down). */
static void *pump(void *arg) {
        struct pump_arg *pa = arg;
        struct ts_proxy *p = pa->p;
        struct link *l = pa->l;
        char buf[16384];
        int a, b;

        free(pa);
        pthread_mutex_lock(&p->lock);
        a = l->a;
        b = l->b;
        pthread_mutex_unlock(&p->lock);
        for (;;) {
                struct pollfd fds[2] = { { .fd = a, .events = POLLIN }, { .fd = b, .events = POLLIN } };
                int n = poll(fds, 2, 200);
                bool done = false;

                pthread_mutex_lock(&p->lock);
                done = p->stopping;
                pthread_mutex_unlock(&p->lock);
                if (done)
                        break;
                if (n < 0 && errno != EINTR)
                        break;
                for (int i = 0; i < 2 && n > 0 && !done; i++) {
                        ssize_t r, w = 0;

                        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        r = read(fds[i].fd, buf, sizeof(buf));
                        if (r <= 0) {
                                done = true;
                                break;
                        }
                        while (w < r) {
                                /* The far end may be gone: an error, not a SIGPIPE that ends the
                                 * test program (it did, in the chaos test, at a link cut). */
                                ssize_t k = send(i == 0 ? b : a, buf + w, (size_t)(r - w), MSG_NOSIGNAL);

                                if (k <= 0) {
                                        done = true;
                                        break;
                                }
                                w += k;
                        }
                }
                if (done)
                        break;
        }
        pthread_mutex_lock(&p->lock);
        if (l->a >= 0) {
                close(l->a);
                close(l->b);
                l->a = l->b = -1;
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

static void *acceptor(void *arg) {
        struct ts_proxy *p = arg;

        for (;;) {
                struct pollfd pf = { .fd = p->listen_fd, .events = POLLIN };
                int c, s;
                bool cut;

                pthread_mutex_lock(&p->lock);
                if (p->stopping) {
                        pthread_mutex_unlock(&p->lock);
                        break;
                }
                pthread_mutex_unlock(&p->lock);
                if (poll(&pf, 1, 200) <= 0)
                        continue;
                c = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        continue;
                pthread_mutex_lock(&p->lock);
                cut = p->cut;
                pthread_mutex_unlock(&p->lock);
                if (cut || (s = connect_target(p->target_port)) < 0) {
                        reset_close(c); /* link down: refused */
                        continue;
                }
                pthread_mutex_lock(&p->lock);
                for (int i = 0; i < MAX_LINKS; i++) {
                        struct link *l = &p->links[i];
                        struct pump_arg *pa;

                        if (l->used && l->a < 0) {
                                /* A finished link: reap its thread before reusing the slot. */
                                pthread_mutex_unlock(&p->lock);
                                pthread_join(l->thread, NULL);
                                pthread_mutex_lock(&p->lock);
                                l->used = false;
                        }
                        if (l->used)
                                continue;
                        pa = malloc(sizeof(*pa));
                        if (!pa)
                                break;
                        *pa = (struct pump_arg){ p, l };
                        l->a = c;
                        l->b = s;
                        l->used = true;
                        p->accepted++;
                        if (pthread_create(&l->thread, NULL, pump, pa) != 0) {
                                free(pa);
                                l->used = false;
                                l->a = l->b = -1;
                                break;
                        }
                        c = s = -1;
                        break;
                }
                pthread_mutex_unlock(&p->lock);
                if (c >= 0) {
                        reset_close(c);
                        reset_close(s);
                }
        }
        return NULL;
}

struct ts_proxy *ts_proxy_start(int target_port) {
        struct ts_proxy *p = calloc(1, sizeof(*p));
        struct sockaddr_in sa = { .sin_family = AF_INET };
        socklen_t len = sizeof(sa);
        int one = 1;

        if (!p)
                fail_msg("proxy: out of memory");
        p->target_port = target_port;
        pthread_mutex_init(&p->lock, NULL);
        for (int i = 0; i < MAX_LINKS; i++)
                p->links[i].a = p->links[i].b = -1;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (p->listen_fd < 0 || setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(p->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(p->listen_fd, 64) < 0 ||
            getsockname(p->listen_fd, (struct sockaddr *)&sa, &len) < 0)
                fail_msg("proxy: cannot listen: %s", strerror(errno));
        p->port = ntohs(sa.sin_port);
        if (pthread_create(&p->acceptor, NULL, acceptor, p) != 0)
                fail_msg("proxy: cannot start its thread");
        return p;
}

int ts_proxy_port(const struct ts_proxy *p) {
        return p->port;
}

int ts_proxy_accepted(const struct ts_proxy *p) {
        return p->accepted;
}

void ts_proxy_cut(struct ts_proxy *p) {
        struct linger lg = { .l_onoff = 1, .l_linger = 0 };

        pthread_mutex_lock(&p->lock);
        p->cut = true;
        /* Only the link's own thread closes its sockets (no descriptor is closed under another
         * thread's poll); here they are shut down, to be reset when that thread closes them. */
        for (int i = 0; i < MAX_LINKS; i++) {
                struct link *l = &p->links[i];

                if (!l->used || l->a < 0)
                        continue;
                setsockopt(l->a, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                setsockopt(l->b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                shutdown(l->a, SHUT_RDWR);
                shutdown(l->b, SHUT_RDWR);
        }
        pthread_mutex_unlock(&p->lock);
}

void ts_proxy_restore(struct ts_proxy *p) {
        pthread_mutex_lock(&p->lock);
        p->cut = false;
        pthread_mutex_unlock(&p->lock);
}

void ts_proxy_stop(struct ts_proxy *p) {
        if (!p)
                return;
        ts_proxy_cut(p);
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->acceptor, NULL);
        for (int i = 0; i < MAX_LINKS; i++)
                if (p->links[i].used)
                        pthread_join(p->links[i].thread, NULL);
        close(p->listen_fd);
        pthread_mutex_destroy(&p->lock);
        free(p);
}
