/* ir_corpus.h — IR texts for the lab 03 hidden tests, embedded in the test binary (the
 * grader runs tests in a sandbox that cannot read the tree). A copy of the .ir files of
 * tests/ir/good and of the files of tests/ir/bad that parse but must fail verification,
 * each with the substring its "# expect:" line names. Copy again by hand when those
 * corpora change: `make test` (tests/lab03/check_corpus.py) fails, naming the file, when
 * a copy here no longer matches. */
#ifndef KILN_LAB03_IR_CORPUS_H
#define KILN_LAB03_IR_CORPUS_H

typedef struct { const char *name, *expect, *text; } l3_ir_case;

static const l3_ir_case l3_bad_ir[] = {
    {"bad_axis.ir", "%1 = softmax: axis 5 out of range for f32[2,3]",
    "# expect: %1 = softmax: axis 5 out of range for f32[2,3]\n"
    "%0 = input {name=\"x\"} : f32[2,3]\n"
    "%1 = softmax %0 {axis=5} : f32[2,3]\n"},
    {"bad_dropout_p.ir", "%1 = dropout: dropout p 1.5 must be in [0, 1)",
    "# expect: %1 = dropout: dropout p 1.5 must be in [0, 1)\n"
    "%0 = input {name=\"x\"} : f32[2,3]\n"
    "%1 = dropout %0 {p=1.5} : f32[2,3]\n"},
    {"bad_keepdim.ir", "%1 = sum: keepdim, ta and tb must be 0 or 1",
    "# expect: %1 = sum: keepdim, ta and tb must be 0 or 1\n"
    "%0 = input {name=\"x\"} : f32[2,3]\n"
    "%1 = sum %0 {keepdim=2} : f32[]\n"},
    {"bad_perm.ir", "%1 = permute: perm is not a permutation of the axes of f32[2,3]",
    "# expect: %1 = permute: perm is not a permutation of the axes of f32[2,3]\n"
    "%0 = input {name=\"x\"} : f32[2,3]\n"
    "%1 = permute %0 {perm=[1,1]} : f32[3,3]\n"},
    {"bad_reshape.ir", "%1 = reshape: cannot reshape f32[2,3] (6 elements) to [4,2]",
    "# expect: %1 = reshape: cannot reshape f32[2,3] (6 elements) to [4,2]\n"
    "%0 = input {name=\"x\"} : f32[2,3]\n"
    "%1 = reshape %0 {shape=[4,2]} : f32[4,2]\n"},
    {"bad_slice_step.ir", "%1 = slice: step 0 must be >= 1",
    "# expect: %1 = slice: step 0 must be >= 1\n"
    "%0 = input {name=\"x\"} : f32[4]\n"
    "%1 = slice %0 {axis=0, start=0, stop=4, step=0} : f32[4]\n"},
    {"broadcast_mismatch.ir", "%2 = add: operand shapes f32[2,3] and f32[4] do not broadcast",
    "# expect: %2 = add: operand shapes f32[2,3] and f32[4] do not broadcast\n"
    "%0 = input {name=\"x\"} : f32[2,3]\n"
    "%1 = input {name=\"y\"} : f32[4]\n"
    "%2 = add %0, %1 : f32[2,3]\n"},
    {"ce_targets.ir", "%2 = cross_entropy: targets f32[4] are not i32 or i64",
    "# expect: %2 = cross_entropy: targets f32[4] are not i32 or i64\n"
    "%0 = input {name=\"logits\"} : f32[4,10]\n"
    "%1 = input {name=\"t\"} : f32[4]\n"
    "%2 = cross_entropy %0, %1 : f32[]\n"},
    {"dtype_mismatch.ir", "%2 = mul: operand dtypes differ: f32[2] and f64[2] (insert a cast)",
    "# expect: %2 = mul: operand dtypes differ: f32[2] and f64[2] (insert a cast)\n"
    "%0 = input {name=\"x\"} : f32[2]\n"
    "%1 = input {name=\"y\"} : f64[2]\n"
    "%2 = mul %0, %1 : f32[2]\n"},
    {"duplicate_name.ir", "%1 = param: name \"x\" is already used by %0",
    "# expect: %1 = param: name \"x\" is already used by %0\n"
    "%0 = input {name=\"x\"} : f32[2]\n"
    "%1 = param {name=\"x\"} : f32[2]\n"},
    {"embedding_index_dtype.ir", "%2 = embedding: indices f32[3] are not i32 or i64",
    "# expect: %2 = embedding: indices f32[3] are not i32 or i64\n"
    "%0 = param {name=\"w\"} : f32[10,4]\n"
    "%1 = input {name=\"i\"} : f32[3]\n"
    "%2 = embedding %0, %1 : f32[3,4]\n"},
    {"huge_type.ir", "%0 = input: declared type f32[4294967296,4294967296] has a negative dimension or too many elements",
    "# expect: %0 = input: declared type f32[4294967296,4294967296] has a negative dimension or too many elements\n"
    "%0 = input {name=\"x\"} : f32[4294967296,4294967296]\n"},
    {"layernorm_weight.ir", "%3 = layernorm: weight f32[4] does not match the last axis of f32[2,8]",
    "# expect: %3 = layernorm: weight f32[4] does not match the last axis of f32[2,8]\n"
    "%0 = input {name=\"x\"} : f32[2,8]\n"
    "%1 = param {name=\"w\"} : f32[4]\n"
    "%2 = param {name=\"b\"} : f32[8]\n"
    "%3 = layernorm %0, %1, %2 : f32[2,8]\n"},
    {"matmul_inner.ir", "%2 = matmul: inner dimensions differ: f32[4,8] @ f32[7,16] (8 vs 7)",
    "# expect: %2 = matmul: inner dimensions differ: f32[4,8] @ f32[7,16] (8 vs 7)\n"
    "%0 = input {name=\"x\"} : f32[4,8]\n"
    "%1 = param {name=\"w\"} : f32[7,16]\n"
    "%2 = matmul %0, %1 : f32[4,16]\n"},
    {"reshape_overflow.ir", "%1 = reshape: the target shape of f32[2] has too many elements",
    "# expect: %1 = reshape: the target shape of f32[2] has too many elements\n"
    "%0 = input {name=\"x\"} : f32[2]\n"
    "%1 = reshape %0 {shape=[4294967296,4294967296,4294967296]} : f32[2]\n"},
    {"wrong_declared_dtype.ir", "%1 = exp: declared type f64[2] but the operands give f32[2]",
    "# expect: %1 = exp: declared type f64[2] but the operands give f32[2]\n"
    "%0 = input {name=\"x\"} : f32[2]\n"
    "%1 = exp %0 : f64[2]\n"},
    {"wrong_declared_type.ir", "%2 = matmul: declared type f32[4,4] but the operands give f32[4,16]",
    "# expect: %2 = matmul: declared type f32[4,4] but the operands give f32[4,16]\n"
    "%0 = input {name=\"x\"} : f32[4,8]\n"
    "%1 = param {name=\"w\"} : f32[8,16]\n"
    "%2 = matmul %0, %1 : f32[4,4]\n"},
};

static const l3_ir_case l3_good_ir[] = {
    {"all_ops.ir", "",
    "%0 = input {name=\"x\"} : f32[2,3,4]\n"
    "%1 = param {name=\"w\"} : f32[4,4]\n"
    "%2 = input {name=\"i\"} : i32[2,3]\n"
    "%3 = full {value=0.25} : f32[]\n"
    "%4 = add %0, %3 : f32[2,3,4]\n"
    "%5 = sub %4, %0 : f32[2,3,4]\n"
    "%6 = mul %5, %0 : f32[2,3,4]\n"
    "%7 = exp %6 : f32[2,3,4]\n"
    "%8 = div %6, %7 : f32[2,3,4]\n"
    "%9 = eq %8, %8 : bool[2,3,4]\n"
    "%10 = where %9, %8, %3 : f32[2,3,4]\n"
    "%11 = neg %10 : f32[2,3,4]\n"
    "%12 = log %7 : f32[2,3,4]\n"
    "%13 = sqrt %7 : f32[2,3,4]\n"
    "%14 = rsqrt %7 : f32[2,3,4]\n"
    "%15 = tanh %12 : f32[2,3,4]\n"
    "%16 = gelu %15 : f32[2,3,4]\n"
    "%17 = relu %16 : f32[2,3,4]\n"
    "%18 = unary_grad %17, %16 {fn=gelu} : f32[2,3,4]\n"
    "%19 = unary_grad %18, %16 {fn=relu} : f32[2,3,4]\n"
    "%20 = cast %19 {dtype=f64} : f64[2,3,4]\n"
    "%21 = cast %20 {dtype=f32} : f32[2,3,4]\n"
    "%22 = dropout %21 {offset=5, p=0.5} : f32[2,3,4]\n"
    "%23 = causal_fill %22 {value=-1} : f32[2,3,4]\n"
    "%24 = sum %23 {axes=[0], keepdim=1} : f32[1,3,4]\n"
    "%25 = mean %23 {axes=[-1]} : f32[2,3]\n"
    "%26 = max %23 : f32[]\n"
    "%27 = matmul %23, %1 {tb=1} : f32[2,3,4]\n"
    "%28 = reshape %27 {shape=[-1,4]} : f32[6,4]\n"
    "%29 = permute %28 {perm=[1,0]} : f32[4,6]\n"
    "%30 = broadcast_to %25 {shape=[4,2,3]} : f32[4,2,3]\n"
    "%31 = slice %30 {axis=-1, start=-2, stop=3} : f32[4,2,2]\n"
    "%32 = slice_grad %31 {shape=[4,2,3], axis=2, start=1, stop=3} : f32[4,2,3]\n"
    "%33 = embedding %1, %2 : f32[2,3,4]\n"
    "%34 = embedding_grad %33, %2 {shape=[4,4]} : f32[4,4]\n"
    "%35 = softmax %34 {axis=0} : f32[4,4]\n"
    "%36 = softmax_bwd %35, %35 : f32[4,4]\n"
    "%37 = log_softmax %36 : f32[4,4]\n"
    "%38 = log_softmax_bwd %37, %37 : f32[4,4]\n"
    "%39 = mean %38 {axes=[0]} : f32[4]\n"
    "%40 = layernorm %0, %39, %39 : f32[2,3,4]\n"
    "%41 = layernorm_dx %40, %0, %39 : f32[2,3,4]\n"
    "%42 = normalize %41 {eps=0.001} : f32[2,3,4]\n"
    "%43 = cross_entropy %42, %2 : f32[]\n"
    "%44 = cross_entropy_bwd %43, %42, %2 : f32[2,3,4]\n"
    "%45 = sum %44 : f32[]\n"
    "%46 = add %45, %26 : f32[]\n"
    "%47 = reshape %2 {shape=[2,3,1]} : i32[2,3,1]\n"
    "%48 = onehot %47 {shape=[2,3,4]} : bool[2,3,4]\n"
    "%49 = where %48, %44, %3 : f32[2,3,4]\n"
    "%50 = sum %49 : f32[]\n"
    "%51 = add %46, %50 : f32[]\n"
    "output %51, %24, %29, %32\n"},
    {"attention.ir", "",
    "%0 = input {name=\"x\"} : f64[2,3,4]\n"
    "%1 = param {name=\"w\"} : f64[4]\n"
    "%2 = param {name=\"b\"} : f64[4]\n"
    "%3 = layernorm %0, %1, %2 : f64[2,3,4]\n"
    "%4 = matmul %3, %3 {tb=1} : f64[2,3,3]\n"
    "%5 = full {value=0.5} : f64[]\n"
    "%6 = mul %4, %5 : f64[2,3,3]\n"
    "%7 = causal_fill %6 {value=-inf} : f64[2,3,3]\n"
    "%8 = softmax %7 : f64[2,3,3]\n"
    "%9 = matmul %8, %3 : f64[2,3,4]\n"
    "%10 = permute %9 {perm=[1,0,2]} : f64[3,2,4]\n"
    "%11 = reshape %10 {shape=[3,8]} : f64[3,8]\n"
    "%12 = slice %11 {axis=1, start=1, stop=8, step=3} : f64[3,3]\n"
    "%13 = max %12 {axes=[1], keepdim=1} : f64[3,1]\n"
    "%14 = broadcast_to %13 {shape=[2,3,3]} : f64[2,3,3]\n"
    "%15 = log_softmax %14 {axis=0} : f64[2,3,3]\n"
    "%16 = mean %15 : f64[]\n"
    "%17 = cast %16 {dtype=f32} : f32[]\n"
    "output %17\n"},
    {"mlp.ir", "",
    "%0 = input {name=\"x\"} : f32[4,8]\n"
    "%1 = input {name=\"t\"} : i64[4]\n"
    "%2 = param {name=\"w1\"} : f32[8,16]\n"
    "%3 = param {name=\"b1\"} : f32[16]\n"
    "%4 = param {name=\"w2\"} : f32[16,5]\n"
    "%5 = matmul %0, %2 : f32[4,16]\n"
    "%6 = add %5, %3 : f32[4,16]\n"
    "%7 = gelu %6 : f32[4,16]\n"
    "%8 = dropout %7 {seed=7, offset=64, p=0.10000000000000001} : f32[4,16]\n"
    "%9 = matmul %8, %4 : f32[4,5]\n"
    "%10 = cross_entropy %9, %1 : f32[]\n"
    "output %10, %9\n"},
};

#endif /* KILN_LAB03_IR_CORPUS_H */
