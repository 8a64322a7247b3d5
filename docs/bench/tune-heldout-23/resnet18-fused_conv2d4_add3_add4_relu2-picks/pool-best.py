# from tvm.script import ir as I
# from tvm.script import tirx as T
# from tvm.tirx.layout import Axis

@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(lv29: T.Buffer((T.int64(1), T.int64(128), T.int64(28), T.int64(28)), "float32"), param_0: T.Buffer((T.int64(128), T.int64(128), T.int64(3), T.int64(3)), "float32"), param_1: T.Buffer((T.int64(1), T.int64(128), T.int64(1), T.int64(1)), "float32"), lv26: T.Buffer((T.int64(1), T.int64(128), T.int64(28), T.int64(28)), "float32"), compute_intermediate: T.Buffer((T.int64(1), T.int64(128), T.int64(28), T.int64(28)), "float32")):
        T.func_attr({"tirx.noalias": True})
        # with T.sblock("root"):
        pad_temp = T.sblock_alloc_buffer((T.int64(1), T.int64(128), T.int64(30), T.int64(30)))
        conv2d_nchw_intermediate = T.sblock_alloc_buffer((T.int64(1), T.int64(128), T.int64(28), T.int64(28)))
        for nn_0_ff_0_yy_0_xx_0_nn_1_ff_1_yy_1_fused_fused in T.parallel(T.int64(56), annotations={"pragma_auto_unroll_max_step": 16, "pragma_unroll_explicit": 1}):
            for xx_1 in range(T.int64(1)):
                for nn_2_init, ff_2_init, yy_2_init, xx_2_init, nn_3_init, ff_3_init, yy_3_init in T.grid(T.int64(1), T.int64(1), T.int64(4), T.int64(2), T.int64(1), T.int64(16), T.int64(1)):
                    for xx_3_fused_init in T.vectorized(T.int64(14)):
                        with T.sblock("conv2d_nchw_init"):
                            v_nn = T.axis.spatial(T.int64(1), nn_2_init + nn_3_init)
                            v_ff = T.axis.spatial(T.int64(128), nn_0_ff_0_yy_0_xx_0_nn_1_ff_1_yy_1_fused_fused // T.int64(7) * T.int64(16) + ff_2_init * T.int64(16) + ff_3_init)
                            v_yy = T.axis.spatial(T.int64(28), nn_0_ff_0_yy_0_xx_0_nn_1_ff_1_yy_1_fused_fused % T.int64(7) * T.int64(4) + yy_2_init + yy_3_init)
                            v_xx = T.axis.spatial(T.int64(28), xx_1 * T.int64(28) + xx_2_init * T.int64(14) + xx_3_fused_init)
                            T.reads()
                            T.writes(conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx])
                            T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                            conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] = T.float32(0.0)
                for rc_0 in range(T.int64(2)):
                    for ax0, ax1, ax2 in T.grid(T.int64(1), T.int64(64), T.int64(6)):
                        for ax3_fused in T.vectorized(T.int64(30)):
                            with T.sblock("pad_temp"):
                                v_i0 = T.axis.spatial(T.int64(1), ax0)
                                v_i1 = T.axis.spatial(T.int64(128), rc_0 * T.int64(64) + ax1)
                                v_i2 = T.axis.spatial(T.int64(30), nn_0_ff_0_yy_0_xx_0_nn_1_ff_1_yy_1_fused_fused % T.int64(7) * T.int64(4) + ax2)
                                v_i3 = T.axis.spatial(T.int64(30), ax3_fused)
                                T.reads(lv29[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)])
                                T.writes(pad_temp[v_i0, v_i1, v_i2, v_i3])
                                pad_temp[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(T.int64(1) <= v_i2 and v_i2 < T.int64(29) and T.int64(1) <= v_i3 and v_i3 < T.int64(29), lv29[v_i0, v_i1, v_i2 - T.int64(1), v_i3 - T.int64(1)], T.float32(0.0))
                    for ry_0, rx_0, nn_2, ff_2, yy_2, xx_2, rc_1, ry_1, rx_1, nn_3, ff_3, yy_3 in T.grid(T.int64(3), T.int64(1), T.int64(1), T.int64(1), T.int64(4), T.int64(2), T.int64(64), T.int64(1), T.int64(3), T.int64(1), T.int64(16), T.int64(1)):
                        for xx_3_fused in T.vectorized(T.int64(14)):
                            with T.sblock("conv2d_nchw_update"):
                                v_nn = T.axis.spatial(T.int64(1), nn_2 + nn_3)
                                v_ff = T.axis.spatial(T.int64(128), nn_0_ff_0_yy_0_xx_0_nn_1_ff_1_yy_1_fused_fused // T.int64(7) * T.int64(16) + ff_2 * T.int64(16) + ff_3)
                                v_yy = T.axis.spatial(T.int64(28), nn_0_ff_0_yy_0_xx_0_nn_1_ff_1_yy_1_fused_fused % T.int64(7) * T.int64(4) + yy_2 + yy_3)
                                v_xx = T.axis.spatial(T.int64(28), xx_1 * T.int64(28) + xx_2 * T.int64(14) + xx_3_fused)
                                v_rc = T.axis.reduce(T.int64(128), rc_0 * T.int64(64) + rc_1)
                                v_ry = T.axis.reduce(T.int64(3), ry_0 + ry_1)
                                v_rx = T.axis.reduce(T.int64(3), rx_0 * T.int64(3) + rx_1)
                                T.reads(conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx], pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx], param_0[v_ff, v_rc, v_ry, v_rx])
                                T.writes(conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx])
                                T.sblock_attr({"meta_schedule.tiling_structure": "SSRSRS"})
                                conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] = conv2d_nchw_intermediate[v_nn, v_ff, v_yy, v_xx] + pad_temp[v_nn, v_rc, v_yy + v_ry, v_xx + v_rx] * param_0[v_ff, v_rc, v_ry, v_rx]
        for i0_i1_i2_i3_fused_0 in T.parallel(T.int64(1568)):
            for i0_i1_i2_i3_fused_1 in T.vectorized(T.int64(64)):
                with T.sblock("compute"):
                    v_i0 = T.axis.spatial(T.int64(1), T.int64(0))
                    v_i1 = T.axis.spatial(T.int64(128), (i0_i1_i2_i3_fused_0 * T.int64(64) + i0_i1_i2_i3_fused_1) // T.int64(784))
                    v_i2 = T.axis.spatial(T.int64(28), (i0_i1_i2_i3_fused_0 * T.int64(64) + i0_i1_i2_i3_fused_1) % T.int64(784) // T.int64(28))
                    v_i3 = T.axis.spatial(T.int64(28), (i0_i1_i2_i3_fused_0 * T.int64(64) + i0_i1_i2_i3_fused_1) % T.int64(28))
                    T.reads(conv2d_nchw_intermediate[v_i0, v_i1, v_i2, v_i3], param_1[v_i0, v_i1, T.int64(0), T.int64(0)], lv26[v_i0, v_i1, v_i2, v_i3])
                    T.writes(compute_intermediate[v_i0, v_i1, v_i2, v_i3])
                    compute_intermediate[v_i0, v_i1, v_i2, v_i3] = T.max(conv2d_nchw_intermediate[v_i0, v_i1, v_i2, v_i3] + param_1[v_i0, v_i1, T.int64(0), T.int64(0)] + lv26[v_i0, v_i1, v_i2, v_i3], T.float32(0.0))