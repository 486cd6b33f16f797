// IQ4_NL and MXFP4 decode rows with AVX-512 VNNI (the AVX-512 VNNI level's
// DecodeRows of the two types): the passes of
// kernels_cpu/decode_rows_nibble_x86.h built with vpdpbusd, which sums u8 x
// s8 products in int32 lanes, so IQ4_NL's values need no activation
// planes: one vpdpbusd per 32 products where AVX2 takes two vpmaddubsw and
// the int16 steps. Same integers, same float steps: the same bits as the
// AVX2 kernels and the scalar reference.
#include "kernels_cpu/decode_rows_nibble_x86.h"

namespace tandem::cpu::detail {

TANDEM_DECODE_ROWS_FNS(iq4_nl, NibbleRows<quant::block_iq4_nl>, avx512)
TANDEM_DECODE_ROWS_FNS(mxfp4, NibbleRows<quant::block_mxfp4>, avx512)

}  // namespace tandem::cpu::detail
