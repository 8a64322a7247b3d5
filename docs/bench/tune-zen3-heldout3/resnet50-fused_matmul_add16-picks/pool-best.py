# from tvm.script import ir as I
# from tvm.script import tirx as T
# from tvm.tirx.layout import Axis

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(lv173: T.Buffer((T.int64(1), T.int64(2048)), "float32"), param_0: T.Buffer((T.int64(2048), T.int64(1000)), "float32"), param_1: T.Buffer((T.int64(1000),), "float32"), T_add_intermediate: T.Buffer((T.int64(1), T.int64(1000)), "float32")):
        T.func_attr({"tirx.noalias": True})
        # with T.sblock("root"):
        matmul_intermediate = T.sblock_alloc_buffer((T.int64(1), T.int64(1000)))
        for i0_0 in T.serial(T.int64(1), annotations={"pragma_auto_unroll_max_step": 16, "pragma_unroll_explicit": 1}):
            for i1_0, i0_1, i1_1 in T.grid(T.int64(1), T.int64(1), T.int64(1)):
                for i0_2_init, i1_2_init, i0_3_init in T.grid(T.int64(1), T.int64(125), T.int64(1)):
                    for i1_3_fused_init in T.vectorized(T.int64(8)):
                        with T.sblock("matmul_init"):
                            v_i0 = T.axis.spatial(T.int64(1), i0_0 + i0_1 + i0_2_init + i0_3_init)
                            v_i1 = T.axis.spatial(T.int64(1000), i1_0 * T.int64(1000) + i1_1 * T.int64(1000) + i1_2_init * T.int64(8) + i1_3_fused_init)
                            T.reads()
                            T.writes(matmul_intermediate[v_i0, v_i1])
                            T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                            matmul_intermediate[v_i0, v_i1] = T.float32(0.0)
                for k_0, i0_2, i1_2, k_1, i0_3 in T.grid(T.int64(512), T.int64(1), T.int64(125), T.int64(4), T.int64(1)):
                    for i1_3_fused in T.vectorized(T.int64(8)):
                        with T.sblock("matmul_update"):
                            v_i0 = T.axis.spatial(T.int64(1), i0_0 + i0_1 + i0_2 + i0_3)
                            v_i1 = T.axis.spatial(T.int64(1000), i1_0 * T.int64(1000) + i1_1 * T.int64(1000) + i1_2 * T.int64(8) + i1_3_fused)
                            v_k = T.axis.reduce(T.int64(2048), k_0 * T.int64(4) + k_1)
                            T.reads(matmul_intermediate[v_i0, v_i1], lv173[v_i0, v_k], param_0[v_k, v_i1])
                            T.writes(matmul_intermediate[v_i0, v_i1])
                            T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                            matmul_intermediate[v_i0, v_i1] = matmul_intermediate[v_i0, v_i1] + lv173[v_i0, v_k] * param_0[v_k, v_i1]
        for ax0_ax1_fused_0 in T.parallel(T.int64(16)):
            for ax0_ax1_fused_1 in T.vectorized(T.int64(64)):
                with T.sblock("T_add"):
                    v_ax0 = T.axis.spatial(T.int64(1), T.int64(0))
                    v_ax1 = T.axis.spatial(T.int64(1000), ax0_ax1_fused_0 * T.int64(64) + ax0_ax1_fused_1)
                    T.where(ax0_ax1_fused_0 * T.int64(64) + ax0_ax1_fused_1 < T.int64(1000))
                    T.reads(matmul_intermediate[v_ax0, v_ax1], param_1[v_ax1])
                    T.writes(T_add_intermediate[v_ax0, v_ax1])
                    T_add_intermediate[v_ax0, v_ax1] = matmul_intermediate[v_ax0, v_ax1] + param_1[v_ax1]