#include <string.h>
#include "igzip_lib.h"
/* One raw-deflate block, stateless: returns the compressed length or -1. */
long isalc_deflate(unsigned level, const unsigned char *in, unsigned in_len, unsigned char *out,
                   unsigned out_len, unsigned char *level_buf, unsigned level_buf_size) {
    struct isal_zstream s;
    isal_deflate_stateless_init(&s);
    s.level = level;
    s.level_buf = level_buf;
    s.level_buf_size = level_buf_size;
    s.gzip_flag = IGZIP_DEFLATE;
    s.end_of_stream = 1;
    s.flush = NO_FLUSH;
    s.next_in = (unsigned char *)in;
    s.avail_in = in_len;
    s.next_out = out;
    s.avail_out = out_len;
    if (isal_deflate_stateless(&s) != COMP_OK) return -1;
    return (long)s.total_out;
}
unsigned isalc_level_buf_size(unsigned level) {
    switch (level) {
    case 0: return ISAL_DEF_LVL0_DEFAULT;
    case 1: return ISAL_DEF_LVL1_DEFAULT;
    case 2: return ISAL_DEF_LVL2_DEFAULT;
    default: return ISAL_DEF_LVL3_DEFAULT;
    }
}
