# from tvm.script import ir as I
# from tvm.script import tirx as T
# from tvm.tirx.layout import Axis

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(lv22: T.Buffer((T.int64(1), T.int64(128), T.int64(1024)), "float32"), param_0: T.Buffer((T.int64(1024), T.int64(4096)), "float32"), param_1: T.Buffer((T.int64(4096),), "float32"), T_multiply_intermediate: T.Buffer((T.int64(1), T.int64(128), T.int64(4096)), "float32")):
        T.func_attr({"tirx.noalias": True})
        # with T.sblock("root"):
        matmul_intermediate = T.sblock_alloc_buffer((T.int64(1), T.int64(128), T.int64(4096)))
        for i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused in T.parallel(T.int64(64), annotations={"pragma_auto_unroll_max_step": 64, "pragma_unroll_explicit": 1}):
            for i0_2_init, i1_2_init, i2_2_init, i0_3_init, i1_3_init in T.grid(T.int64(1), T.int64(2), T.int64(64), T.int64(1), T.int64(4)):
                for i2_3_fused_init in T.vectorized(T.int64(16)):
                    with T.sblock("matmul_init"):
                        v_i0 = T.axis.spatial(T.int64(1), i0_2_init + i0_3_init)
                        v_i1 = T.axis.spatial(T.int64(128), i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused // T.int64(16) * T.int64(32) + i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(8) // T.int64(2) * T.int64(8) + i1_2_init * T.int64(4) + i1_3_init)
                        v_i2 = T.axis.spatial(T.int64(4096), i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(16) // T.int64(8) * T.int64(2048) + i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(2) * T.int64(1024) + i2_2_init * T.int64(16) + i2_3_fused_init)
                        T.reads()
                        T.writes(matmul_intermediate[v_i0, v_i1, v_i2])
                        T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                        matmul_intermediate[v_i0, v_i1, v_i2] = T.float32(0.0)
            for k_0, i0_2, i1_2, i2_2, k_1, i0_3, i1_3 in T.grid(T.int64(256), T.int64(1), T.int64(2), T.int64(64), T.int64(4), T.int64(1), T.int64(4)):
                for i2_3_fused in T.vectorized(T.int64(16)):
                    with T.sblock("matmul_update"):
                        v_i0 = T.axis.spatial(T.int64(1), i0_2 + i0_3)
                        v_i1 = T.axis.spatial(T.int64(128), i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused // T.int64(16) * T.int64(32) + i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(8) // T.int64(2) * T.int64(8) + i1_2 * T.int64(4) + i1_3)
                        v_i2 = T.axis.spatial(T.int64(4096), i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(16) // T.int64(8) * T.int64(2048) + i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(2) * T.int64(1024) + i2_2 * T.int64(16) + i2_3_fused)
                        v_k = T.axis.reduce(T.int64(1024), k_0 * T.int64(4) + k_1)
                        T.reads(matmul_intermediate[v_i0, v_i1, v_i2], lv22[v_i0, v_i1, v_k], param_0[v_k, v_i2])
                        T.writes(matmul_intermediate[v_i0, v_i1, v_i2])
                        T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                        matmul_intermediate[v_i0, v_i1, v_i2] = matmul_intermediate[v_i0, v_i1, v_i2] + lv22[v_i0, v_i1, v_k] * param_0[v_k, v_i2]
            for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(8), T.int64(1024)):
                with T.sblock("T_multiply_2"):
                    v_ax0 = T.axis.spatial(T.int64(1), ax0)
                    v_ax1 = T.axis.spatial(T.int64(128), i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused // T.int64(16) * T.int64(32) + i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(8) // T.int64(2) * T.int64(8) + ax1)
                    v_ax2 = T.axis.spatial(T.int64(4096), i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(16) // T.int64(8) * T.int64(2048) + i0_0_i1_0_i2_0_i0_1_i1_1_i2_1_fused % T.int64(2) * T.int64(1024) + ax2)
                    T.reads(matmul_intermediate[v_ax0, v_ax1, v_ax2], param_1[v_ax2])
                    T.writes(T_multiply_intermediate[v_ax0, v_ax1, v_ax2])
                    T_multiply_intermediate[v_ax0, v_ax1, v_ax2] = (matmul_intermediate[v_ax0, v_ax1, v_ax2] + param_1[v_ax2]) * (T.float32(0.5) + T.erf((matmul_intermediate[v_ax0, v_ax1, v_ax2] + param_1[v_ax2]) * T.float32(0.70710678118654757)) * T.float32(0.5))