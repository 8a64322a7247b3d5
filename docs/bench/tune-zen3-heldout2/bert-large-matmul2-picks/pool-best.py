# from tvm.script import ir as I
# from tvm.script import tirx as T
# from tvm.tirx.layout import Axis

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(lv15: T.Buffer((T.int64(1), T.int64(16), T.int64(128), T.int64(128)), "float32"), lv11: T.Buffer((T.int64(1), T.int64(16), T.int64(128), T.int64(64)), "float32"), matmul: T.Buffer((T.int64(1), T.int64(16), T.int64(128), T.int64(64)), "float32")):
        T.func_attr({"op_pattern": 4, "tirx.noalias": True})
        # with T.sblock("root"):
        for i0_0_i1_0_i2_0_i3_0_i0_1_i1_1_i2_1_fused in T.parallel(T.int64(1024)):
            for i3_1 in range(T.int64(2)):
                for i0_2_init, i1_2_init, i2_2_init, i3_2_init, i0_3_init, i1_3_init, i2_3_init in T.grid(T.int64(1), T.int64(1), T.int64(1), T.int64(2), T.int64(1), T.int64(1), T.int64(2)):
                    for i3_3_fused_init in T.vectorized(T.int64(16)):
                        with T.sblock("matmul_init"):
                            v_i0 = T.axis.spatial(T.int64(1), i0_2_init + i0_3_init)
                            v_i1 = T.axis.spatial(T.int64(16), i0_0_i1_0_i2_0_i3_0_i0_1_i1_1_i2_1_fused // T.int64(64) + i1_2_init + i1_3_init)
                            v_i2 = T.axis.spatial(T.int64(128), i0_0_i1_0_i2_0_i3_0_i0_1_i1_1_i2_1_fused % T.int64(64) * T.int64(2) + i2_2_init * T.int64(2) + i2_3_init)
                            v_i3 = T.axis.spatial(T.int64(64), i3_1 * T.int64(32) + i3_2_init * T.int64(16) + i3_3_fused_init)
                            T.reads()
                            T.writes(matmul[v_i0, v_i1, v_i2, v_i3])
                            T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                            matmul[v_i0, v_i1, v_i2, v_i3] = T.float32(0.0)
                for k_0, i0_2, i1_2, i2_2, i3_2, k_1, i0_3, i1_3, i2_3 in T.grid(T.int64(128), T.int64(1), T.int64(1), T.int64(1), T.int64(2), T.int64(1), T.int64(1), T.int64(1), T.int64(2)):
                    for i3_3_fused in T.vectorized(T.int64(16)):
                        with T.sblock("matmul_update"):
                            v_i0 = T.axis.spatial(T.int64(1), i0_2 + i0_3)
                            v_i1 = T.axis.spatial(T.int64(16), i0_0_i1_0_i2_0_i3_0_i0_1_i1_1_i2_1_fused // T.int64(64) + i1_2 + i1_3)
                            v_i2 = T.axis.spatial(T.int64(128), i0_0_i1_0_i2_0_i3_0_i0_1_i1_1_i2_1_fused % T.int64(64) * T.int64(2) + i2_2 * T.int64(2) + i2_3)
                            v_i3 = T.axis.spatial(T.int64(64), i3_1 * T.int64(32) + i3_2 * T.int64(16) + i3_3_fused)
                            v_k = T.axis.reduce(T.int64(128), k_0 + k_1)
                            T.reads(matmul[v_i0, v_i1, v_i2, v_i3], lv15[v_i0, v_i1, v_i2, v_k], lv11[v_i0, v_i1, v_k, v_i3])
                            T.writes(matmul[v_i0, v_i1, v_i2, v_i3])
                            T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                            matmul[v_i0, v_i1, v_i2, v_i3] = matmul[v_i0, v_i1, v_i2, v_i3] + lv15[v_i0, v_i1, v_i2, v_k] * lv11[v_i0, v_i1, v_k, v_i3]