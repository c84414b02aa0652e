/*
 * A server's HTTP/2 session over libnghttp2, bound for the gateway's use only.
 *
 * ngh2 (the general binding) builds a Python object for every header, event and call; on a
 * one-record produce that binding cost as much as libnghttp2 itself (docs/PERFORMANCE.md, "One
 * flush a turn"). This one hands the gateway what it acts on and nothing more:
 *
 * - events are plain tuples (kind, stream id, a, b);
 * - a request's header block is one bytes object, "name\0value\0" a field: the key of the
 *   gateway's memo of parsed requests, split only when the memo misses (nghttp2 refuses NUL in
 *   names and values, so the encoding is unambiguous);
 * - a request whose whole body follows its header block in the same read (a one-record
 *   produce) is one event carrying both, not a request and its body's;
 * - an answer (HEADERS and a whole body) is one call;
 * - a stream the gateway has released ("forget") raises no event when it closes.
 *
 * Framing, HPACK, flow control and HTTP messaging rules are libnghttp2's. The header list
 * limit is checked here, field by field as they are decoded: past it the connection is ended
 * (CalmError), as is a CONTINUATION flood (the library's own limit) or a flood of frames the
 * peer makes us answer. So is a breach of the stream rules libnghttp2 does not check: with
 * RFC 7540 priorities off (as we announce) it keeps no closed stream and skips PRIORITY frames
 * unread, and it never refuses a new stream below the last. The peer's frame headers are read
 * here before the library reads them ("the client's streams" below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <string.h>

enum event_kind {
    EV_REQUEST = 0,       /* (0, stream, header block, end_stream) */
    EV_DATA,              /* (1, stream, bytes, end_stream) */
    EV_TRAILERS,          /* (2, stream, None, True) */
    EV_CLOSED,            /* (3, stream, error code, None) */
    EV_RESET,             /* (4, stream, error code, None): the peer's RST_STREAM */
    EV_WINDOW,            /* (5, stream or 0, None, None) */
    EV_SETTINGS,          /* (6, 0, None, None) */
    EV_GOAWAY,            /* (7, 0, error code, None) */
    EV_TERMINATED,        /* (8, 0, None, None): the session sent its final GOAWAY */
    EV_REQUEST_WITH_BODY, /* (9, stream, header block, body): a request ended by its body */
    EV_KINDS
};

#define MAX_CONTINUATIONS 8
#define FRAME_HEADER 9             /* RFC 9113 §4.1 */
#define PRIORITY_LENGTH 5          /* a PRIORITY frame's payload (RFC 9113 §6.3) */
#define PEER_WINDOW 256            /* client streams remembered below the last one opened */
#define FIELD_OVERHEAD 32          /* RFC 9113 §6.5.2: a field's size is name, value and 32 */
#define OUT_KEPT (256 * 1024)      /* a larger output buffer is freed after use */
#define OUT_COPIED (16 * 1024)     /* data_to_send copies out what is no larger; more is the
                                      buffer itself, handed over */
#define DATA_KEPT (64 * 1024)      /* and a larger buffer of held DATA after a read */

static PyObject *kinds[EV_KINDS];
static PyObject *SessionError;
static PyObject *CalmError;
static PyObject *StreamClosedError;
static nghttp2_session_callbacks *callbacks;

typedef struct chunk {
    PyObject *obj; /* a bytes object, owned */
    Py_ssize_t off;
    struct chunk *next;
} chunk;

/* What the session keeps of a stream: its queued body, and whether it was released. */
typedef struct stream_state {
    struct stream_state *prev, *next;
    chunk *head, *tail;
    Py_ssize_t queued;
    int32_t stream_id;
    int responded; /* its response's HEADERS are submitted */
    int streaming; /* its body comes by send_data */
    int end;       /* the body's last chunk is queued */
    int deferred;  /* the data provider waits for a chunk */
    int forgotten; /* its closing raises no event */
} stream_state;

/* The client's streams as its own frames make them (RFC 9113 §5.1), for what libnghttp2 does
 * not check: a new stream below the last one opened (§5.1.1), DATA or HEADERS after the
 * client's own END_STREAM or RST_STREAM on the stream (§5.1), a PRIORITY frame on stream 0 or
 * making its stream depend on itself (§6.3, §5.3.1); each a connection error. Only frame
 * headers (and a PRIORITY frame's five bytes) are read; a stream is one byte, kept for the
 * PEER_WINDOW client stream identifiers up to the last opened. Older ones are left to
 * libnghttp2, which ignores what comes on a stream it no longer has. Our own RST_STREAM ends
 * nothing here: the client may have sent more before it saw it, which the library ignores. */
enum peer_state {
    PEER_SKIPPED = 0, /* never opened: an identifier the client passed over, closed for good */
    PEER_OPEN,        /* opened by the client's HEADERS */
    PEER_ENDED,       /* the client's END_STREAM or RST_STREAM: it sends nothing more on it */
};

typedef struct {
    uint8_t head[FRAME_HEADER + PRIORITY_LENGTH]; /* the frame's header read so far */
    size_t head_len, head_want;
    size_t skip;                  /* the preface's or the frame's payload bytes still to pass */
    int32_t last;                 /* the highest stream a HEADERS frame opened */
    uint8_t streams[PEER_WINDOW]; /* enum peer_state, by (stream id / 2) % PEER_WINDOW */
} peer_streams;

typedef struct {
    PyObject_HEAD
    nghttp2_session *session;
    PyObject *events;         /* list, or NULL while none */
    int failed;               /* a callback raised (a Python exception is set) */
    int too_large;            /* a header block passed max_header_list_size */
    size_t max_header_list_size;
    char *block;              /* the header block being received */
    size_t block_len, block_cap, block_size;
    char *data;               /* one stream's DATA bytes held back (see on_data_chunk) */
    size_t data_len, data_cap;
    int32_t data_stream;      /* 0: none held */
    PyObject *request;        /* a request's header block held back (see on_frame_recv), or NULL */
    int32_t request_stream;
    PyObject *out;            /* data_to_send's buffer: a bytes object only we hold, or NULL */
    size_t out_len, out_cap;
    size_t out_hint;          /* the size of the last buffer handed over: the next one's */
    stream_state *streams;    /* every stream_state, freed on close or with the session */
    int own_flow_resets;      /* RST_STREAM FLOW_CONTROL_ERROR we submitted, still to send */
    int ending;               /* we ended the connection (terminate, or a frame refused) */
    peer_streams peer;
} Session;

/* ---- events ------------------------------------------------------------------------------ */

static int emit_held_data(Session *self, int end_stream);
static int emit_held_request(Session *self);

/* Append (kind, stream_id, a, b) as it is; steals a and b. */
static int
append(Session *self, enum event_kind kind, int32_t stream_id, PyObject *a, PyObject *b)
{
    PyObject *sid = NULL, *event = NULL;
    if (a == NULL || b == NULL) {
        goto fail;
    }
    if (self->events == NULL && (self->events = PyList_New(0)) == NULL) {
        goto fail;
    }
    if ((sid = PyLong_FromLong(stream_id)) == NULL || (event = PyTuple_New(4)) == NULL) {
        goto fail;
    }
    Py_INCREF(kinds[kind]);
    PyTuple_SET_ITEM(event, 0, kinds[kind]);
    PyTuple_SET_ITEM(event, 1, sid);
    PyTuple_SET_ITEM(event, 2, a);
    PyTuple_SET_ITEM(event, 3, b);
    int rv = PyList_Append(self->events, event);
    Py_DECREF(event);
    if (rv < 0) {
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
fail:
    Py_XDECREF(sid);
    Py_XDECREF(a);
    Py_XDECREF(b);
    self->failed = 1;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* Append (kind, stream_id, a, b), after any request and DATA held back (events keep the
 * frames' order); steals a and b. */
static int
emit(Session *self, enum event_kind kind, int32_t stream_id, PyObject *a, PyObject *b)
{
    if ((self->request != NULL && emit_held_request(self) < 0) ||
        (kind != EV_DATA && self->data_stream != 0 && emit_held_data(self, 0) < 0)) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return append(self, kind, stream_id, a, b);
}

static PyObject *
none(void)
{
    Py_RETURN_NONE;
}

static PyObject *
flag(int value)
{
    return PyBool_FromLong(value);
}

/* The DATA bytes held back as one event. */
static int
emit_held_data(Session *self, int end_stream)
{
    int32_t stream_id = self->data_stream;
    self->data_stream = 0;
    return emit(self, EV_DATA, stream_id,
                PyBytes_FromStringAndSize(self->data, (Py_ssize_t)self->data_len),
                flag(end_stream));
}

/* The request held back as a REQUEST event (its body did not come whole with it). */
static int
emit_held_request(Session *self)
{
    PyObject *block = self->request;
    self->request = NULL;
    return append(self, EV_REQUEST, self->request_stream, block, flag(0));
}

/* Whatever is held back, as events: at the end of a read. */
static int
emit_held(Session *self)
{
    if (self->request != NULL && emit_held_request(self) < 0) {
        return -1;
    }
    return self->data_stream != 0 ? emit_held_data(self, 0) : 0;
}

static PyObject *
take_events(Session *self)
{
    PyObject *events = self->events;
    self->events = NULL;
    return events != NULL ? events : PyList_New(0);
}

/* ---- stream state ------------------------------------------------------------------------ */

static void
free_state(Session *self, stream_state *st)
{
    if (st->prev != NULL) {
        st->prev->next = st->next;
    } else {
        self->streams = st->next;
    }
    if (st->next != NULL) {
        st->next->prev = st->prev;
    }
    for (chunk *c = st->head; c != NULL;) {
        chunk *next = c->next;
        Py_DECREF(c->obj);
        PyMem_Free(c);
        c = next;
    }
    PyMem_Free(st);
}

/* The stream's state, made if it has none; NULL with StreamClosedError if the stream is gone. */
static stream_state *
state_of(Session *self, int32_t stream_id)
{
    if (nghttp2_session_find_stream(self->session, stream_id) == NULL) {
        PyErr_Format(StreamClosedError, "stream %d is closed", (int)stream_id);
        return NULL;
    }
    stream_state *st = nghttp2_session_get_stream_user_data(self->session, stream_id);
    if (st != NULL) {
        return st;
    }
    st = PyMem_Calloc(1, sizeof(*st));
    if (st == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    st->stream_id = stream_id;
    st->next = self->streams;
    if (st->next != NULL) {
        st->next->prev = st;
    }
    self->streams = st;
    nghttp2_session_set_stream_user_data(self->session, stream_id, st);
    return st;
}

/* Queue a body chunk (a bytes object, or a copy of any other buffer). */
static int
queue_chunk(stream_state *st, PyObject *data)
{
    PyObject *obj;
    if (PyBytes_CheckExact(data)) {
        Py_INCREF(data);
        obj = data;
    } else if ((obj = PyBytes_FromObject(data)) == NULL) {
        return -1;
    }
    if (PyBytes_GET_SIZE(obj) == 0) {
        Py_DECREF(obj);
        return 0;
    }
    chunk *c = PyMem_Malloc(sizeof(*c));
    if (c == NULL) {
        Py_DECREF(obj);
        PyErr_NoMemory();
        return -1;
    }
    c->obj = obj;
    c->off = 0;
    c->next = NULL;
    if (st->tail != NULL) {
        st->tail->next = c;
    } else {
        st->head = c;
    }
    st->tail = c;
    st->queued += PyBytes_GET_SIZE(obj);
    return 0;
}

/* How many of a stream's queued body bytes go in its next DATA frame: not copied here, but
 * by send_body when the frame is sent (NO_COPY), straight into data_to_send's buffer. */
static ssize_t
read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
          uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)buf;
    (void)user_data;
    stream_state *st = source->ptr;
    size_t n = (size_t)st->queued < length ? (size_t)st->queued : length;
    if (n == (size_t)st->queued && st->end) {
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    } else if (n == 0) {
        st->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > 0) {
        *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    }
    return (ssize_t)n;
}

/* Room for `n` more bytes in data_to_send's buffer; -1 with MemoryError. A new buffer is as
 * large as the last one handed over, so that output of the same size needs no growing. */
static int
reserve_out(Session *self, size_t n)
{
    size_t need = self->out_len + n;
    if (need <= self->out_cap) {
        return 0;
    }
    size_t first = self->out_hint > 4096 ? self->out_hint : 4096;
    size_t cap = self->out_cap ? self->out_cap * 2 : first;
    while (cap < need) {
        cap *= 2;
    }
    if (self->out == NULL) {
        self->out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    } else if (_PyBytes_Resize(&self->out, (Py_ssize_t)cap) < 0) {
        self->out = NULL; /* freed by _PyBytes_Resize */
    }
    if (self->out == NULL) {
        self->out_len = self->out_cap = 0;
        return -1;
    }
    self->out_cap = cap;
    return 0;
}

static void
put_out(Session *self, const void *bytes, size_t n)
{
    memcpy(PyBytes_AS_STRING(self->out) + self->out_len, bytes, n);
    self->out_len += n;
}

/* A DATA frame whose bytes read_body left in the stream's queue: its header, its bytes taken
 * from the queued chunks, and any padding, appended to data_to_send's buffer. */
static int
send_body(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
          nghttp2_data_source *source, void *user_data)
{
    (void)session;
    Session *self = user_data;
    stream_state *st = source->ptr;
    size_t padlen = frame->data.padlen;
    if (reserve_out(self, FRAME_HEADER + length + padlen) < 0) {
        self->failed = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    put_out(self, framehd, FRAME_HEADER);
    if (padlen > 0) {
        uint8_t pad_length = (uint8_t)(padlen - 1);
        put_out(self, &pad_length, 1);
    }
    while (length > 0) {
        chunk *c = st->head;
        size_t left = (size_t)(PyBytes_GET_SIZE(c->obj) - c->off);
        size_t n = left < length ? left : length;
        put_out(self, PyBytes_AS_STRING(c->obj) + c->off, n);
        length -= n;
        c->off += (Py_ssize_t)n;
        st->queued -= (Py_ssize_t)n;
        if (c->off == PyBytes_GET_SIZE(c->obj)) {
            st->head = c->next;
            if (st->head == NULL) {
                st->tail = NULL;
            }
            Py_DECREF(c->obj);
            PyMem_Free(c);
        }
    }
    if (padlen > 1) {
        memset(PyBytes_AS_STRING(self->out) + self->out_len, 0, padlen - 1);
        self->out_len += padlen - 1;
    }
    return 0;
}

/* ---- the client's streams ----------------------------------------------------------------- */

static uint32_t
read31(const uint8_t *at)
{
    return ((uint32_t)(at[0] & 0x7f) << 24) | ((uint32_t)at[1] << 16) | ((uint32_t)at[2] << 8) |
           at[3];
}

/* A client stream's state, NULL if it is too far below the last one opened to be kept. */
static uint8_t *
peer_stream(peer_streams *peer, int32_t stream_id)
{
    if (peer->last - stream_id >= 2 * PEER_WINDOW) {
        return NULL;
    }
    return &peer->streams[(stream_id >> 1) % PEER_WINDOW];
}

/* The client opened `stream_id`, above the last: the identifiers between are skipped. */
static uint8_t *
peer_open(peer_streams *peer, int32_t stream_id)
{
    for (int32_t id = stream_id - 2; id > peer->last && stream_id - id < 2 * PEER_WINDOW;
         id -= 2) {
        peer->streams[(id >> 1) % PEER_WINDOW] = PEER_SKIPPED;
    }
    peer->last = stream_id;
    uint8_t *state = &peer->streams[(stream_id >> 1) % PEER_WINDOW];
    *state = PEER_OPEN;
    return state;
}

/* The connection error a frame from the client is (its header and, for PRIORITY, payload),
 * or 0: libnghttp2 judges it. */
static uint32_t
peer_check(peer_streams *peer, const uint8_t *head)
{
    uint32_t length = ((uint32_t)head[0] << 16) | ((uint32_t)head[1] << 8) | head[2];
    uint8_t type = head[3], flags = head[4];
    int32_t stream_id = (int32_t)read31(head + 5);
    uint8_t *state;
    switch (type) {
    case NGHTTP2_PRIORITY:
        if (length != PRIORITY_LENGTH) {
            return 0; /* FRAME_SIZE_ERROR, the library's */
        }
        return stream_id == 0 || (int32_t)read31(head + FRAME_HEADER) == stream_id
                   ? NGHTTP2_PROTOCOL_ERROR
                   : 0;
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA:
        if ((stream_id & 1) == 0) {
            return 0; /* stream 0 or a server's identifier: the library's PROTOCOL_ERROR */
        }
        if (stream_id > peer->last) {
            if (type == NGHTTP2_DATA) {
                return 0; /* an idle stream: the library's PROTOCOL_ERROR */
            }
            state = peer_open(peer, stream_id);
        } else if ((state = peer_stream(peer, stream_id)) == NULL) {
            return 0;
        } else if (*state == PEER_ENDED) {
            return NGHTTP2_STREAM_CLOSED;
        } else if (*state == PEER_SKIPPED) {
            return type == NGHTTP2_HEADERS ? NGHTTP2_PROTOCOL_ERROR : 0;
        }
        if (flags & NGHTTP2_FLAG_END_STREAM) {
            *state = PEER_ENDED;
        }
        return 0;
    case NGHTTP2_RST_STREAM:
        if (length == 4 && (stream_id & 1) && stream_id <= peer->last &&
            (state = peer_stream(peer, stream_id)) != NULL && *state == PEER_OPEN) {
            *state = PEER_ENDED;
        }
        return 0;
    default:
        return 0;
    }
}

/* Read the frame headers in `len` received bytes (a frame's may span reads): how many of the
 * bytes libnghttp2 is to read, all but from the first frame refused, whose error is `*code`. */
static size_t
peer_scan(peer_streams *peer, const uint8_t *in, size_t len, uint32_t *code)
{
    size_t at = 0, frame_at = 0; /* a frame begun in an earlier read begins at 0 in this one */
    while (at < len) {
        if (peer->skip > 0) {
            size_t n = peer->skip < len - at ? peer->skip : len - at;
            peer->skip -= n;
            at += n;
            continue;
        }
        if (peer->head_len == 0) {
            frame_at = at;
        }
        size_t n = peer->head_want - peer->head_len;
        n = n < len - at ? n : len - at;
        memcpy(peer->head + peer->head_len, in + at, n);
        peer->head_len += n;
        at += n;
        if (peer->head_len < peer->head_want) {
            break;
        }
        uint32_t length =
            ((uint32_t)peer->head[0] << 16) | ((uint32_t)peer->head[1] << 8) | peer->head[2];
        if (peer->head_want == FRAME_HEADER && peer->head[3] == NGHTTP2_PRIORITY &&
            length == PRIORITY_LENGTH) {
            peer->head_want += PRIORITY_LENGTH;
            continue;
        }
        *code = peer_check(peer, peer->head);
        peer->skip = length - (peer->head_want - FRAME_HEADER);
        peer->head_len = 0;
        peer->head_want = FRAME_HEADER;
        if (*code != 0) {
            return frame_at;
        }
    }
    return len;
}

/* ---- callbacks --------------------------------------------------------------------------- */

static int
on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    (void)session;
    (void)frame;
    Session *self = user_data;
    self->block_len = 0;
    self->block_size = 0;
    return 0;
}

static int
on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
          size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
    (void)session;
    (void)frame;
    (void)flags;
    Session *self = user_data;
    self->block_size += namelen + valuelen + FIELD_OVERHEAD;
    if (self->block_size > self->max_header_list_size) {
        self->too_large = 1;
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    size_t need = self->block_len + namelen + valuelen + 2;
    if (need > self->block_cap) {
        size_t cap = self->block_cap ? self->block_cap : 512;
        while (cap < need) {
            cap *= 2;
        }
        char *block = PyMem_Realloc(self->block, cap);
        if (block == NULL) {
            PyErr_NoMemory();
            self->failed = 1;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        self->block = block;
        self->block_cap = cap;
    }
    char *at = self->block + self->block_len;
    memcpy(at, name, namelen);
    at[namelen] = '\0';
    memcpy(at + namelen + 1, value, valuelen);
    at[namelen + 1 + valuelen] = '\0';
    self->block_len = need;
    return 0;
}

/* A field libnghttp2 finds invalid: refuse the stream, whatever the release's default for it
 * (some releases drop such a field and serve the request). */
static int
on_invalid_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                  size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                  void *user_data)
{
    (void)session;
    (void)frame;
    (void)name;
    (void)namelen;
    (void)value;
    (void)valuelen;
    (void)flags;
    (void)user_data;
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
}

/* A stream's body bytes are held back while its DATA frames follow one another in a read,
 * and raised as one event (a 100 KB body is seven 16 KiB frames): at its END_STREAM, at
 * another stream's bytes or any other event, or at the end of the read. */
static int
on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
              size_t len, void *user_data)
{
    (void)session;
    (void)flags;
    Session *self = user_data;
    if (self->request != NULL && self->request_stream != stream_id &&
        emit_held_request(self) < 0) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (self->data_stream != stream_id) {
        if (self->data_stream != 0 && emit_held_data(self, 0) < 0) {
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        self->data_stream = stream_id;
        self->data_len = 0;
    }
    if (self->data_len + len > self->data_cap) {
        size_t cap = self->data_cap ? self->data_cap : 16384;
        while (cap < self->data_len + len) {
            cap *= 2;
        }
        char *held = PyMem_Realloc(self->data, cap);
        if (held == NULL) {
            PyErr_NoMemory();
            self->failed = 1;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        self->data = held;
        self->data_cap = cap;
    }
    memcpy(self->data + self->data_len, data, len);
    self->data_len += len;
    return 0;
}

static int
on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    (void)session;
    Session *self = user_data;
    int32_t stream_id = frame->hd.stream_id;
    int end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
    case NGHTTP2_DATA:
        if (!end_stream) {
            return 0; /* its bytes stay held for the frames that follow */
        }
        if (self->request != NULL && self->request_stream == stream_id) {
            /* The whole body came with the header block: one event. Its bytes hold window
             * until acknowledged, as a DATA event's; libnghttp2 has checked them against any
             * content-length before this callback (a mismatch resets the stream instead). */
            PyObject *block = self->request, *body;
            self->request = NULL;
            if (self->data_stream == stream_id) {
                self->data_stream = 0;
                body = PyBytes_FromStringAndSize(self->data, (Py_ssize_t)self->data_len);
            } else {
                body = PyBytes_FromStringAndSize(NULL, 0);
            }
            return append(self, EV_REQUEST_WITH_BODY, stream_id, block, body);
        }
        if (self->data_stream != stream_id) {
            if (self->data_stream != 0 && emit_held_data(self, 0) < 0) {
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
            self->data_stream = stream_id;
            self->data_len = 0;
        }
        return emit_held_data(self, 1);
    case NGHTTP2_HEADERS:
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
            PyObject *block = PyBytes_FromStringAndSize(self->block, (Py_ssize_t)self->block_len);
            if (end_stream || block == NULL) {
                return emit(self, EV_REQUEST, stream_id, block, flag(end_stream));
            }
            /* Held back until the read's next event, another stream's bytes or its end: if
             * its body's END_STREAM comes first, the request and body are one event. */
            if (emit_held(self) < 0) {
                Py_DECREF(block);
                return NGHTTP2_ERR_CALLBACK_FAILURE;
            }
            self->request = block;
            self->request_stream = stream_id;
            return 0;
        }
        if (frame->headers.cat == NGHTTP2_HCAT_HEADERS) {
            return emit(self, EV_TRAILERS, stream_id, none(), flag(1));
        }
        return 0;
    case NGHTTP2_RST_STREAM:
        return emit(self, EV_RESET, stream_id,
                    PyLong_FromUnsignedLong(frame->rst_stream.error_code), none());
    case NGHTTP2_SETTINGS:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK) {
            return 0;
        }
        return emit(self, EV_SETTINGS, 0, none(), none());
    case NGHTTP2_WINDOW_UPDATE:
        return emit(self, EV_WINDOW, stream_id, none(), none());
    case NGHTTP2_GOAWAY:
        return emit(self, EV_GOAWAY, 0, PyLong_FromUnsignedLong(frame->goaway.error_code),
                    none());
    default:
        return 0;
    }
}

static int
on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                void *user_data)
{
    Session *self = user_data;
    stream_state *st = nghttp2_session_get_stream_user_data(session, stream_id);
    int forgotten = 0;
    if (st != NULL) {
        forgotten = st->forgotten;
        free_state(self, st);
        nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    }
    if (forgotten) {
        return 0;
    }
    return emit(self, EV_CLOSED, stream_id, PyLong_FromUnsignedLong(error_code), none());
}

static int
on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    if (frame->hd.type == NGHTTP2_GOAWAY) {
        return emit(user_data, EV_TERMINATED, 0, none(), none());
    }
    Session *self = user_data;
    if (frame->hd.type == NGHTTP2_RST_STREAM &&
        frame->rst_stream.error_code == NGHTTP2_FLOW_CONTROL_ERROR) {
        if (self->own_flow_resets > 0) {
            self->own_flow_resets--; /* one of ours (reset_stream), not the library's */
            return 0;
        }
        /* The library resets a stream so when its peer sent past the stream's window.
         * libnghttp2 1.52 makes that a stream error, later releases (and ngh2) a connection
         * error; RFC 9113 §6.9.1 allows both, and a peer that ignores windows is not trusted
         * with the connection either. */
        return nghttp2_session_terminate_session(session, NGHTTP2_FLOW_CONTROL_ERROR);
    }
    return 0;
}

/* ---- the Session type -------------------------------------------------------------------- */

static void
Session_dealloc(Session *self)
{
    if (self->session != NULL) {
        nghttp2_session_del(self->session);
    }
    while (self->streams != NULL) {
        free_state(self, self->streams);
    }
    Py_CLEAR(self->events);
    Py_CLEAR(self->request);
    PyMem_Free(self->data);
    PyMem_Free(self->block);
    Py_CLEAR(self->out);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
in_range(const char *name, long long value, long long low, long long high)
{
    if (value < low || value > high) {
        PyErr_Format(PyExc_ValueError, "%s must be in %lld..%lld", name, low, high);
        return 0;
    }
    return 1;
}

static int
Session_init(Session *self, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"max_concurrent_streams", "max_header_list_size",
                               "initial_window_size", "max_frame_size",
                               "connection_window_size", NULL};
    long long streams, header_list, window, frame, connection;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$LLLLL", keywords, &streams, &header_list,
                                     &window, &frame, &connection)) {
        return -1;
    }
    if (self->session != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Session is already initialised");
        return -1;
    }
    if (!in_range("max_concurrent_streams", streams, 1, UINT32_MAX) ||
        !in_range("max_header_list_size", header_list, 1, UINT32_MAX) ||
        !in_range("initial_window_size", window, 1, NGHTTP2_MAX_WINDOW_SIZE) ||
        !in_range("max_frame_size", frame, 16384,
                  16777215) ||
        !in_range("connection_window_size", connection, NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE,
                  NGHTTP2_MAX_WINDOW_SIZE)) {
        return -1;
    }
    self->max_header_list_size = (size_t)header_list;
    self->peer.skip = NGHTTP2_CLIENT_MAGIC_LEN;
    self->peer.head_want = FRAME_HEADER;
    nghttp2_option *option;
    if (nghttp2_option_new(&option) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    /* The gateway gives window back as handlers read (acknowledge_received_data). */
    nghttp2_option_set_no_auto_window_update(option, 1);
    nghttp2_option_set_max_continuations(option, MAX_CONTINUATIONS);
    int rv = nghttp2_session_server_new2(&self->session, callbacks, self, option);
    nghttp2_option_del(option);
    if (rv != 0) {
        self->session = NULL;
        PyErr_NoMemory();
        return -1;
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)header_list},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)window},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, (uint32_t)frame},
        /* RFC 7540's priority tree is deprecated (RFC 9113 §5.3.2) and gone from later
         * libnghttp2s (ngh2's): the checks it brought in 1.52 are the client's streams'. */
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    rv = nghttp2_submit_settings(self->session, NGHTTP2_FLAG_NONE, settings,
                                 sizeof(settings) / sizeof(settings[0]));
    if (rv == 0 && connection != NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE) {
        rv = nghttp2_session_set_local_window_size(self->session, NGHTTP2_FLAG_NONE, 0,
                                                   (int32_t)connection);
    }
    if (rv != 0) {
        PyErr_SetString(SessionError, nghttp2_strerror(rv));
        return -1;
    }
    return 0;
}

static int
ready(Session *self)
{
    if (self->session == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Session is not initialised");
        return 0;
    }
    return 1;
}

/* Whether the session takes more to send (else `error` is raised): not once it has ended the
 * connection itself, by terminate or over a frame it refused, as ngh2's does not either. */
static int
working(Session *self, PyObject *error)
{
    if (!ready(self)) {
        return 0;
    }
    if (self->ending) {
        PyErr_SetString(error, "the session has ended the connection");
        return 0;
    }
    return 1;
}

/* A callback's Python error, or nghttp2's error `rv`, as an exception; NULL. */
static PyObject *
fail(Session *self, int rv)
{
    Py_CLEAR(self->events);
    Py_CLEAR(self->request);
    self->data_stream = 0;
    if (self->failed) {
        self->failed = 0;
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    if (self->too_large || rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
        PyErr_SetString(CalmError, self->too_large ? "header list too large"
                                                   : nghttp2_strerror(rv));
    } else {
        PyErr_SetString(SessionError, nghttp2_strerror(rv));
    }
    return NULL;
}

static PyObject *
Session_receive(Session *self, PyObject *data)
{
    Py_buffer view;
    if (!ready(self) || PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    uint32_t refused = 0;
    size_t take = self->ending ? 0 : peer_scan(&self->peer, view.buf, (size_t)view.len, &refused);
    ssize_t rv = take > 0 ? nghttp2_session_mem_recv(self->session, view.buf, take) : 0;
    PyBuffer_Release(&view);
    if (rv >= 0 && refused != 0) {
        /* The frames before it stand; the connection ends with a GOAWAY of the library's. */
        self->ending = 1;
        int ended = nghttp2_session_terminate_session(self->session, refused);
        if (nghttp2_is_fatal(ended)) {
            rv = ended;
        }
    }
    if (rv >= 0 && emit_held(self) < 0) {
        rv = NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    if (self->data_cap > DATA_KEPT) {
        PyMem_Free(self->data);
        self->data = NULL;
        self->data_cap = 0;
    }
    if (rv < 0 || self->failed) {
        return fail(self, (int)rv);
    }
    return take_events(self);
}

static PyObject *
Session_events(Session *self, PyObject *Py_UNUSED(ignored))
{
    return take_events(self);
}

static PyObject *
Session_data_to_send(Session *self, PyObject *Py_UNUSED(ignored))
{
    if (!ready(self)) {
        return NULL;
    }
    self->out_len = 0;
    for (;;) {
        const uint8_t *piece;
        ssize_t len = nghttp2_session_mem_send(self->session, &piece);
        if (len < 0 || self->failed) {
            return fail(self, (int)len);
        }
        if (len == 0) {
            break;
        }
        if (reserve_out(self, (size_t)len) < 0) {
            return NULL;
        }
        put_out(self, piece, (size_t)len);
    }
    size_t total = self->out_len;
    self->out_len = 0;
    if (total <= OUT_COPIED) {
        const char *bytes = total ? PyBytes_AS_STRING(self->out) : "";
        PyObject *result = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)total);
        if (self->out_cap > OUT_KEPT) {
            Py_CLEAR(self->out);
            self->out_cap = 0;
        }
        return result;
    }
    /* Large output (a body's DATA frames): the buffer itself, cut to its length, rather than a
     * copy of it; the next flush starts a buffer of the same size. */
    PyObject *result = self->out;
    self->out = NULL;
    self->out_cap = 0;
    self->out_hint = total <= OUT_KEPT ? total : OUT_KEPT;
    if (_PyBytes_Resize(&result, (Py_ssize_t)total) < 0) {
        return NULL;
    }
    return result;
}

/* A header list (a sequence of (name, value) bytes pairs) as nghttp2 fields, in `nva` (of
 * `room` entries) or a new array the caller frees; -1 with an exception. */
static Py_ssize_t
fields_of(PyObject *headers, nghttp2_nv *nva, Py_ssize_t room, nghttp2_nv **out, PyObject **fast)
{
    *fast = PySequence_Fast(headers, "headers must be a sequence of (name, value) pairs");
    if (*fast == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(*fast);
    if (n > room) {
        nva = PyMem_Malloc(sizeof(*nva) * (size_t)n);
        if (nva == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    *out = nva;
    PyObject **items = PySequence_Fast_ITEMS(*fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "a header is a (name, value) pair of bytes");
            return -1;
        }
        PyObject *name = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
        nva[i].name = (uint8_t *)PyBytes_AS_STRING(name);
        nva[i].namelen = (size_t)PyBytes_GET_SIZE(name);
        nva[i].value = (uint8_t *)PyBytes_AS_STRING(value);
        nva[i].valuelen = (size_t)PyBytes_GET_SIZE(value);
        nva[i].flags = NGHTTP2_NV_FLAG_NONE;
    }
    return n;
}

#define FIELDS_ON_STACK 16

/* Submit a response's HEADERS; with `body` (a buffer, or Py_None for a body sent later with
 * send_data) a data provider follows them, else they end the stream. */
static PyObject *
submit(Session *self, int32_t stream_id, PyObject *headers, PyObject *body, int end_stream)
{
    nghttp2_nv stack[FIELDS_ON_STACK], *nva = stack;
    PyObject *fast = NULL;
    PyObject *result = NULL;
    if (!working(self, StreamClosedError)) {
        return NULL;
    }
    Py_ssize_t n = fields_of(headers, stack, FIELDS_ON_STACK, &nva, &fast);
    if (n < 0) {
        goto done;
    }
    nghttp2_data_provider provider, *prd = NULL;
    stream_state *st = state_of(self, stream_id);
    if (st == NULL) {
        goto done;
    }
    if (st->responded) {
        PyErr_Format(SessionError, "stream %d is already answered", (int)stream_id);
        goto done;
    }
    if (!end_stream) {
        if (body != Py_None && queue_chunk(st, body) < 0) {
            goto done;
        }
        provider.source.ptr = st;
        provider.read_callback = read_body;
        prd = &provider;
    }
    int rv = nghttp2_submit_response(self->session, stream_id, nva, (size_t)n, prd);
    if (rv != 0) {
        PyErr_SetString(nghttp2_is_fatal(rv) ? SessionError : StreamClosedError,
                        nghttp2_strerror(rv));
        goto done;
    }
    st->responded = 1;
    if (!end_stream) {
        st->end = body != Py_None;
        st->streaming = body == Py_None;
    }
    result = Py_NewRef(Py_None);
done:
    if (nva != stack) {
        PyMem_Free(nva);
    }
    Py_XDECREF(fast);
    return result;
}

/* An HTTP/2 error code (32 bits) in `out`; -1 with an exception. */
static int
error_code_of(PyObject *obj, uint32_t *out)
{
    unsigned long value = PyLong_AsUnsignedLong(obj);
    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (value > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "an error code is in 0..2**32-1");
        return -1;
    }
    *out = (uint32_t)value;
    return 0;
}

static int32_t
stream_id_of(PyObject *obj)
{
    long value = PyLong_AsLong(obj);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (value < 1 || value > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a stream id is in 1..2**31-1");
        return -1;
    }
    return (int32_t)value;
}

static PyObject *
Session_respond(Session *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "respond(stream_id, headers, body)");
        return NULL;
    }
    int32_t stream_id = stream_id_of(args[0]);
    if (stream_id < 0) {
        return NULL;
    }
    Py_ssize_t size = PyObject_Length(args[2]);
    if (size < 0) {
        return NULL;
    }
    return submit(self, stream_id, args[1], args[2], size == 0);
}

static PyObject *
Session_send_headers(Session *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_headers(stream_id, headers, end_stream)");
        return NULL;
    }
    int32_t stream_id = stream_id_of(args[0]);
    int end_stream = PyObject_IsTrue(args[2]);
    if (stream_id < 0 || end_stream < 0) {
        return NULL;
    }
    return submit(self, stream_id, args[1], Py_None, end_stream);
}

static PyObject *
Session_send_data(Session *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_data(stream_id, data, end_stream)");
        return NULL;
    }
    int32_t stream_id = stream_id_of(args[0]);
    int end_stream = PyObject_IsTrue(args[2]);
    if (stream_id < 0 || end_stream < 0 || !working(self, StreamClosedError)) {
        return NULL;
    }
    stream_state *st = state_of(self, stream_id);
    if (st == NULL) {
        return NULL;
    }
    if (!st->streaming || st->end) {
        PyErr_Format(SessionError, "stream %d has no body open (send_headers first, once)",
                     (int)stream_id);
        return NULL;
    }
    if (queue_chunk(st, args[1]) < 0) {
        return NULL;
    }
    st->end = end_stream;
    if (st->deferred && (st->head != NULL || st->end)) {
        st->deferred = 0;
        int rv = nghttp2_session_resume_data(self->session, stream_id);
        if (rv != 0) {
            PyErr_SetString(SessionError, nghttp2_strerror(rv));
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
Session_send_informational(Session *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send_informational(stream_id, headers)");
        return NULL;
    }
    int32_t stream_id = stream_id_of(args[0]);
    if (stream_id < 0 || !working(self, StreamClosedError)) {
        return NULL;
    }
    if (nghttp2_session_find_stream(self->session, stream_id) == NULL) {
        PyErr_Format(StreamClosedError, "stream %d is closed", (int)stream_id);
        return NULL;
    }
    nghttp2_nv stack[FIELDS_ON_STACK], *nva = stack;
    PyObject *fast = NULL, *result = NULL;
    Py_ssize_t n = fields_of(args[1], stack, FIELDS_ON_STACK, &nva, &fast);
    if (n >= 0) {
        int rv = nghttp2_submit_headers(self->session, NGHTTP2_FLAG_NONE, stream_id, NULL, nva,
                                        (size_t)n, NULL);
        if (rv < 0) {
            PyErr_SetString(StreamClosedError, nghttp2_strerror(rv));
        } else {
            result = Py_NewRef(Py_None);
        }
    }
    if (nva != stack) {
        PyMem_Free(nva);
    }
    Py_XDECREF(fast);
    return result;
}

static PyObject *
Session_reset_stream(Session *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "reset_stream(stream_id, error_code)");
        return NULL;
    }
    uint32_t code;
    int32_t stream_id = stream_id_of(args[0]);
    if (stream_id < 0 || error_code_of(args[1], &code) < 0 || !working(self, SessionError)) {
        return NULL;
    }
    int rv = nghttp2_submit_rst_stream(self->session, NGHTTP2_FLAG_NONE, stream_id, code);
    if (rv != 0) {
        PyErr_SetString(SessionError, nghttp2_strerror(rv));
        return NULL;
    }
    if (code == NGHTTP2_FLOW_CONTROL_ERROR) {
        self->own_flow_resets++;
    }
    Py_RETURN_NONE;
}

static PyObject *
Session_acknowledge_received_data(Session *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "acknowledge_received_data(amount, stream_id)");
        return NULL;
    }
    Py_ssize_t amount = PyLong_AsSsize_t(args[0]);
    if (amount == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int32_t stream_id = stream_id_of(args[1]);
    if (stream_id < 0 || !ready(self)) {
        return NULL;
    }
    if (amount < 0) {
        PyErr_SetString(PyExc_ValueError, "amount must not be negative");
        return NULL;
    }
    if (self->ending) {
        Py_RETURN_NONE; /* no window goes out after the final GOAWAY */
    }
    int rv = nghttp2_session_consume(self->session, stream_id, (size_t)amount);
    if (rv != 0) {
        PyErr_SetString(SessionError, nghttp2_strerror(rv));
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Session_queued_body_size(Session *self, PyObject *arg)
{
    int32_t stream_id = stream_id_of(arg);
    if (stream_id < 0 || !ready(self)) {
        return NULL;
    }
    stream_state *st = nghttp2_session_get_stream_user_data(self->session, stream_id);
    return PyLong_FromSsize_t(st != NULL ? st->queued : 0);
}

static PyObject *
Session_forget(Session *self, PyObject *arg)
{
    int32_t stream_id = stream_id_of(arg);
    if (stream_id < 0 || !ready(self)) {
        return NULL;
    }
    if (nghttp2_session_find_stream(self->session, stream_id) != NULL) {
        stream_state *st = state_of(self, stream_id);
        if (st == NULL) {
            return NULL;
        }
        st->forgotten = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *
Session_terminate(Session *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "terminate(error_code, last_stream_id)");
        return NULL;
    }
    uint32_t code;
    if (error_code_of(args[0], &code) < 0) {
        return NULL;
    }
    long last = PyLong_AsLong(args[1]);
    if ((last == -1 && PyErr_Occurred()) || !ready(self)) {
        return NULL;
    }
    if (last < 0 || last > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "last_stream_id is in 0..2**31-1");
        return NULL;
    }
    int rv = nghttp2_session_terminate_session2(self->session, (int32_t)last, code);
    if (rv != 0) {
        PyErr_SetString(SessionError, nghttp2_strerror(rv));
        return NULL;
    }
    self->ending = 1;
    Py_RETURN_NONE;
}

static PyObject *
Session_want_read(Session *self, void *Py_UNUSED(closure))
{
    return ready(self) ? PyBool_FromLong(nghttp2_session_want_read(self->session)) : NULL;
}

static PyObject *
Session_want_write(Session *self, void *Py_UNUSED(closure))
{
    return ready(self) ? PyBool_FromLong(nghttp2_session_want_write(self->session)) : NULL;
}

static PyMethodDef Session_methods[] = {
    {"receive", (PyCFunction)Session_receive, METH_O,
     "Feed received bytes; the events they raised."},
    {"events", (PyCFunction)Session_events, METH_NOARGS,
     "The events raised since the last call (by sending: streams closed, the final GOAWAY)."},
    {"data_to_send", (PyCFunction)Session_data_to_send, METH_NOARGS,
     "The bytes the session has to send now."},
    {"respond", (PyCFunction)(void (*)(void))Session_respond, METH_FASTCALL,
     "Answer a stream: its HEADERS, then its whole body (none: the HEADERS end it)."},
    {"send_headers", (PyCFunction)(void (*)(void))Session_send_headers, METH_FASTCALL,
     "Send a response's HEADERS; unless they end the stream, its body follows by send_data."},
    {"send_data", (PyCFunction)(void (*)(void))Session_send_data, METH_FASTCALL,
     "Queue a chunk of a response's body, framed as the peer's windows allow."},
    {"send_informational", (PyCFunction)(void (*)(void))Session_send_informational,
     METH_FASTCALL, "Send a 1xx response's HEADERS."},
    {"reset_stream", (PyCFunction)(void (*)(void))Session_reset_stream, METH_FASTCALL,
     "Send RST_STREAM."},
    {"acknowledge_received_data", (PyCFunction)(void (*)(void))Session_acknowledge_received_data,
     METH_FASTCALL, "Give back window for body bytes consumed."},
    {"queued_body_size", (PyCFunction)Session_queued_body_size, METH_O,
     "A stream's body bytes queued and not yet framed."},
    {"forget", (PyCFunction)Session_forget, METH_O,
     "The stream was released: its closing raises no event."},
    {"terminate", (PyCFunction)(void (*)(void))Session_terminate, METH_FASTCALL,
     "End the connection with a GOAWAY (sent by data_to_send)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Session_getset[] = {
    {"want_read", (getter)Session_want_read, NULL, "Whether the session reads on.", NULL},
    {"want_write", (getter)Session_want_write, NULL, "Whether it has bytes to send.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SessionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gateway.http._h2session.Session",
    .tp_basicsize = sizeof(Session),
    .tp_dealloc = (destructor)Session_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A server's HTTP/2 session (libnghttp2), sans I/O.",
    .tp_methods = Session_methods,
    .tp_getset = Session_getset,
    .tp_init = (initproc)Session_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module ------------------------------------------------------------------------------ */

static int
add_error(PyObject *module, const char *name, PyObject *base, PyObject **out)
{
    char qualified[64];
    snprintf(qualified, sizeof(qualified), "gateway.http._h2session.%s", name);
    *out = PyErr_NewException(qualified, base, NULL);
    return *out == NULL ? -1 : PyModule_AddObjectRef(module, name, *out);
}

static int
exec_module(PyObject *module)
{
    if (callbacks == NULL) {
        if (nghttp2_session_callbacks_new(&callbacks) != 0) {
            PyErr_NoMemory();
            return -1;
        }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
        nghttp2_session_callbacks_set_on_invalid_header_callback(callbacks, on_invalid_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, on_frame_send);
        nghttp2_session_callbacks_set_send_data_callback(callbacks, send_body);
    }
    for (int i = 0; i < EV_KINDS; i++) {
        if (kinds[i] == NULL && (kinds[i] = PyLong_FromLong(i)) == NULL) {
            return -1;
        }
    }
    static const char *names[EV_KINDS] = {
        "REQUEST", "DATA",     "TRAILERS", "CLOSED",     "RESET",
        "WINDOW",  "SETTINGS", "GOAWAY",   "TERMINATED", "REQUEST_WITH_BODY",
    };
    for (int i = 0; i < EV_KINDS; i++) {
        if (PyModule_AddIntConstant(module, names[i], i) < 0) {
            return -1;
        }
    }
    if (PyType_Ready(&SessionType) < 0 ||
        PyModule_AddObjectRef(module, "Session", (PyObject *)&SessionType) < 0 ||
        add_error(module, "SessionError", PyExc_Exception, &SessionError) < 0 ||
        add_error(module, "CalmError", SessionError, &CalmError) < 0 ||
        add_error(module, "StreamClosedError", SessionError, &StreamClosedError) < 0) {
        return -1;
    }
    return PyModule_AddStringConstant(module, "NGHTTP2_VERSION", nghttp2_version(0)->version_str);
}

static struct PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway.http._h2session",
    .m_doc = "A server's HTTP/2 session over libnghttp2, bound for the gateway.",
    .m_size = 0,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__h2session(void)
{
    return PyModuleDef_Init(&module_def);
}
