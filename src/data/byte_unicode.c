/* GPT-2's reversible byte <-> unicode map: printable Latin-1 bytes ('!'..'~',
 * '¡'..'¬', '®'..'ÿ') map to themselves, the other 68 bytes to U+0100 +
 * n in byte order. The same order numbers GPT-2's first 256 ids. */
#include "data/bpe.h"

static int printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

uint32_t oj_gpt2_byte_to_cp(uint8_t b) {
    if (printable(b))
        return b;
    int n = 0;
    for (int k = 0; k < b; k++)
        n += !printable(k);
    return 256u + (uint32_t)n;
}

int oj_gpt2_cp_to_byte(uint32_t cp) {
    if (cp < 256)
        return printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    int n = (int)(cp - 256);
    for (int k = 0; k < 256; k++)
        if (!printable(k) && n-- == 0)
            return k;
    return -1;
}

int oj_gpt2_byte_rank(uint8_t b) {
    if (printable(b)) {
        int r = 0;
        for (int k = 0; k < b; k++)
            r += printable(k);
        return r;
    }
    return 188 + (int)oj_gpt2_byte_to_cp(b) - 256;
}
