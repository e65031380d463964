"""Chinese query support for the handbook search: the cross-language term map, segmented with jieba.

The handbook is written in English; a Chinese query is cut into words by jieba (its dictionary-graph search for
the most probable segmentation, run over `TERMS` and `STOPWORDS` only, not jieba's general dictionary, and
without its HMM guesser), and each recognised word is replaced by the English words that the handbook uses for
the same idea. Characters the dictionary does not know are kept as character bigrams, which match Chinese text
in the handbook (the glossary carries Chinese equivalents). Words in `STOPWORDS` are dropped. jieba is imported
on the first Chinese query, so an English search never loads it.

`TERMS` maps a Chinese word to English: the words before a `|` are the translation (full weight), the
words after it are related words (lower weight). Keep entries general (the vocabulary of DiT inference
work on a GPU), never tuned to one query. No library carries this map; it is the part of the search that is
the project's own.
"""

from __future__ import annotations

import functools
import io
import logging
import re

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")

TERMS: dict[str, str] = {
    # hardware and memory
    "显存": "memory vram|gb",
    "显卡": "gpu",
    "显卡内存": "memory vram",
    "内存": "memory",
    "爆显存": "out of memory oom",
    "显存不够": "out of memory|vram",
    "显存不足": "out of memory|vram",
    "内存不足": "out of memory",
    "内存溢出": "out of memory oom",
    "溢出": "overflow",
    "峰值": "peak",
    "峰值显存": "peak memory",
    "占用": "usage|memory",
    "带宽": "bandwidth",
    "显存带宽": "memory bandwidth",
    "算力": "tflops compute|throughput",
    "吞吐": "throughput",
    "吞吐量": "throughput",
    "延迟": "latency",
    "时延": "latency",
    "耗时": "time latency",
    "张量核心": "tensor cores",
    "张量核": "tensor cores",
    "共享内存": "shared memory",
    "寄存器": "registers",
    "占用率": "occupancy",
    "流式多处理器": "sm sms",
    "缓存": "cache",
    "二级缓存": "l2 cache",
    "频率": "clocks",
    "时钟": "clocks",
    "锁频": "lock clocks",
    "锁定频率": "lock clocks",
    "功耗": "power",
    "降频": "throttle clocks",
    "温度": "temperature",
    "拓扑": "topology",
    "总线": "pcie",
    "多卡": "multi gpu two gpus",
    "双卡": "two gpus dual",
    "两张卡": "two gpus dual",
    "单卡": "single gpu",
    "主机": "host",
    "设备": "device",
    "目标设备": "target device",
    "目标硬件": "target hardware",
    "硬件": "hardware",
    "支持": "support supported",
    "不支持": "not supported",
    "工作站": "workstation",
    "数据中心": "data centre",
    "架构": "architecture",
    "计算能力": "compute capability",
    # precision, quantization
    "精度": "precision",
    "数值": "numerical",
    "数值误差": "numerical error",
    "误差": "error",
    "半精度": "fp16 bf16",
    "单精度": "fp32",
    "混合精度": "mixed precision bf16",
    "浮点": "float",
    "量化": "quantization",
    "反量化": "dequantization",
    "权重量化": "weight quantization",
    "仅权重": "weight only",
    "权重": "weights",
    "激活": "activation",
    "激活值": "activation",
    "整数": "integer int8",
    "八位": "int8 8-bit",
    "四位": "int4 4-bit",
    "8位": "int8 8-bit",
    "4位": "int4 4-bit",
    "逐通道": "per channel",
    "缩放因子": "scales",
    "离群值": "outliers",
    "稀疏": "sparse sparsity",
    "类型转换": "casting cast",
    "分层类型转换": "layerwise casting",
    "逐层类型转换": "layerwise casting",
    "存储": "storage",
    "存储类型": "storage dtype",
    "计算类型": "compute dtype",
    "数据类型": "dtype",
    # attention and kernels
    "注意力": "attention",
    "自注意力": "self attention",
    "交叉注意力": "cross attention",
    "联合注意力": "joint attention",
    "注意力后端": "attention backend sdpa",
    "后端": "backend",
    "掩码": "mask",
    "注意力掩码": "attention mask",
    "头维度": "head dim",
    "内核": "kernel kernels",
    "核函数": "kernel kernels",
    "算子": "op ops kernel",
    "算子融合": "fusion fuse",
    "融合": "fusion fuse",
    "手写": "custom hand written",
    "自定义": "custom",
    "矩阵乘": "gemm matmul",
    "矩阵乘法": "gemm matmul",
    "矩阵向量乘": "gemv",
    "分块": "tile tiles tiling",
    "波量化": "wave quantization",
    "波次": "wave",
    "卷积": "convolution conv",
    "通道优先": "channels last",
    "内存布局": "layout memory format",
    "布局": "layout",
    "对齐": "alignment",
    "归一化": "norm normalization",
    "层归一化": "layer norm",
    "调制": "modulation",
    "逐元素": "pointwise elementwise",
    # compile, graphs, host
    "编译": "compile torch.compile",
    "区域编译": "regional compilation",
    "重复块": "repeated blocks",
    "图断裂": "graph breaks",
    "断图": "graph breaks",
    "重新编译": "recompiles",
    "重编译": "recompiles",
    "编译时间": "compile time",
    "编译缓存": "compile cache inductor",
    "冷启动": "cold start",
    "预热": "warm-up warmup",
    "自动调优": "autotune autotuning",
    "调优": "tuning autotune",
    "图": "graph",
    "计算图": "graph",
    "静态形状": "static shapes",
    "形状": "shape shapes",
    "动态形状": "dynamic shapes",
    "分桶": "buckets",
    "捕获": "capture",
    "重放": "replay",
    "内存池": "pool memory pool",
    "启动开销": "launch overhead",
    "内核启动": "kernel launch",
    "开销": "overhead",
    "主机开销": "host overhead",
    "同步": "sync synchronisation",
    "主机同步": "host sync",
    "调度器": "scheduler",
    "异步": "asynchronous non_blocking",
    "锁页内存": "pinned memory",
    "固定内存": "pinned memory",
    "拷贝": "copy memcpy",
    "传输": "transfer transfers",
    "数据传输": "transfers memcpy",
    "卸载": "offload",
    "分组卸载": "group offload",
    "驻留": "resident",
    "生命周期": "lifetime",
    "组件": "components",
    "分配器": "allocator",
    "碎片": "fragmentation",
    "内存碎片": "fragmentation",
    "切片": "slicing",
    "平铺": "tiling",
    "瓦片": "tiling tiles",
    "分块解码": "tiled decode tiling",
    "分块计算": "chunking",
    # models and pipeline
    "扩散": "diffusion",
    "扩散模型": "diffusion model",
    "扩散变换器": "diffusion transformer dit",
    "变换器": "transformer",
    "文本编码器": "text encoder",
    "编码器": "encoder",
    "文本编码": "text encode",
    "编码": "encode",
    "解码": "decode",
    "解码器": "decoder",
    "变分自编码器": "vae",
    "自编码器": "vae autoencoder",
    "去噪": "denoise",
    "采样": "sampling",
    "采样器": "sampler",
    "步数": "steps",
    "采样步数": "sampling steps",
    "减少步数": "fewer steps",
    "求解器": "solver",
    "蒸馏": "distillation",
    "分辨率": "resolution",
    "批大小": "batch",
    "批次": "batch",
    "批处理": "batch batched",
    "提示词": "prompt",
    "负面提示词": "negative prompt",
    "负向提示词": "negative prompt",
    "嵌入": "embedding embeddings",
    "时间步": "timestep",
    "类别": "class",
    "类别标签": "class labels",
    "引导": "guidance",
    "无分类器引导": "classifier-free guidance cfg",
    "引导区间": "guidance interval",
    "条件": "conditional cond",
    "无条件": "unconditional uncond",
    "截断": "truncation",
    "缓存复用": "caching reuse",
    "特征复用": "feature reuse caching",
    "特征缓存": "feature caching",
    "跨步缓存": "caching across steps",
    "块缓存": "block cache",
    "首块缓存": "first block cache",
    "令牌": "token tokens",
    "词元": "token tokens",
    "令牌合并": "token merging",
    "词元合并": "token merging",
    "令牌下采样": "token downsampling",
    "下采样": "downsampling",
    "近似": "approximate approximation",
    "近似实验": "approximate experiment",
    "嵌入式": "embedded",
    "手写数字": "handwritten digits",
    "判别器": "judge",
    "分类器": "classifier judge",
    "随机权重": "random weights",
    "真实权重": "real weights checkpoint",
    "检查点": "checkpoint",
    # parallelism
    "并行": "parallel",
    "序列并行": "sequence parallel",
    "张量并行": "tensor parallel",
    "流水线并行": "pipeline parallel",
    "引导并行": "cfg parallel",
    "通信": "communication",
    "集合通信": "collectives nccl",
    # harness, loop, method
    "基线": "baseline",
    "实验": "experiment",
    "候选": "candidate",
    "提交": "commit",
    "分支": "branch",
    "回滚": "reset",
    "重置": "reset",
    "判决": "verdict",
    "裁决": "verdict",
    "保留": "keep",
    "丢弃": "discard",
    "崩溃": "crash",
    "拒绝": "refused",
    "质量": "quality",
    "质量门": "quality gate",
    "门限": "gate threshold",
    "阈值": "threshold",
    "保真度": "fidelity",
    "峰值信噪比": "psnr",
    "结构相似性": "ssim",
    "任务指标": "task metric",
    "非劣效": "non-inferiority",
    "噪声": "noise",
    "噪声包络": "noise envelope",
    "显著性": "significance",
    "统计": "statistics",
    "误判": "false keep",
    "误保留": "false keep",
    "进程": "process processes",
    "进程间": "between processes",
    "护栏": "guardrail",
    "序贯检验": "sequential test",
    "序贯": "sequential",
    "分段": "segments",
    "新进程": "fresh process",
    "尾延迟": "tail latency p95",
    "交错": "interleaved",
    "确认": "confirmation",
    "分类": "class classification",
    "实验分类": "experiment classes",
    "审计": "audit",
    "声明": "declare declared",
    "屋顶线": "roofline",
    "屋顶线模型": "roofline",
    "瓶颈": "bottleneck",
    "访存": "memory bound bandwidth",
    "访存瓶颈": "memory bound",
    "计算瓶颈": "compute bound",
    "性能分析": "profile profiling",
    "剖析": "profile profiling",
    "分析": "profile analysis",
    "阶段": "stage stages",
    "时间线": "timeline",
    "火焰图": "trace timeline",
    "微基准": "microbenchmark",
    "微基准测试": "microbenchmark",
    "基准测试": "benchmark",
    "测量": "measurement measure",
    "计时": "timing",
    "清空": "flush",
    "刷新": "flush",
    "复现": "reproduce reproducibility",
    "可复现": "reproducibility",
    "引用": "cite citation",
    "来源": "sources",
    "假设": "hypothesis",
    "声明标准": "claims standard",
    "流程": "runbook workflow",
    "运行手册": "runbook",
    "冷机": "cold machine",
    "顺序": "order ladder",
    "优化顺序": "optimization ladder order",
    "先做什么": "what to try first ladder",
    "阶梯": "ladder",
    "优化": "optimization",
    "性能": "performance speed",
    "速度": "speed latency",
    "慢": "slow",
    "快": "fast faster",
    "加速": "speedup faster",
    "更快": "faster",
    "变慢": "slower regressed",
    "太慢": "slow",
    "停止": "stop",
    "停止条件": "stop rule",
    "何时停止": "when to stop",
    "笔记": "notes",
    "记录": "notes ledger",
    "失败": "failure failures",
    "最近失败": "recent failures",
    "简洁": "simplicity",
    "复杂度": "complexity",
    "入口": "entry point",
    "术语": "glossary terms",
    "术语表": "glossary",
    "症状": "symptom",
    "索引": "index",
    "交互": "interaction",
    "相互作用": "interaction",
    "组合": "combine interaction",
    "冲突": "conflict interaction",
    "导入": "import",
    "依赖": "dependency dependencies",
    "安装": "installed install",
    "库": "library libraries",
    "第三方库": "library libraries",
    "通道": "lane",
    "车道": "lane",
    "线程": "threads",
    "线程数": "threads",
    "教训": "lessons",
    "会话": "session",
    # numbers people write in words
    "一": "one",
    "两": "two",
    "二": "two",
    "三": "three",
    "四": "four",
    "八": "eight",
    "十": "ten",
}

# Words that carry no search meaning in a question; dropped when the dictionary does not know them.
STOPWORDS = frozenset(
    """的 了 吗 呢 吧 啊 呀 和 与 及 或 在 是 有 把 被 让 给 对 从 到 用 为 以 而 并 但 就 都 也 还 很 更 最 不 没
    会 要 能 该 这 那 哪 我 你 他 她 它 们 个 些 里 上 下 中 时 后 前 再 又 才 已 将 其 之 于 如 若 则 即 等
    怎么 怎样 如何 什么 哪些 哪个 为什么 是否 能否 可以 应该 需要 一下 一个 这个 那个 我们 你们 没有 还是
    有没有 会不会 是不是 能不能 要不要 怎么办 多少 问题 情况 时候 方法 办法 以及 或者 还有 然后 所以""".split()
)

# Every dictionary word gets the same count: the most probable path through the word graph is then the one with
# the fewest characters left unknown, and among those the one with the fewest words (the longest matches).
_WORD_COUNT = 1000


@functools.lru_cache(maxsize=1)
def _segmenter():
    """A jieba tokenizer whose dictionary is `TERMS` plus `STOPWORDS` (built in memory on first use)."""
    import jieba

    jieba.setLogLevel(logging.WARNING)  # it logs its dictionary loading at DEBUG to stderr by default
    lines = "".join(f"{word} {_WORD_COUNT}\n" for word in sorted(set(TERMS) | STOPWORDS)).encode("utf-8")

    class _Terms(jieba.Tokenizer):
        def initialize(self, dictionary=None):  # jieba's own reads (and caches) a dictionary file
            with self.lock:
                if not self.initialized:
                    self.FREQ, self.total = self.gen_pfdict(io.BytesIO(lines))
                    self.initialized = True

    return _Terms()


def segment(run: str) -> list[tuple[str, str | None]]:
    """Split one run of CJK characters into (word, english) pairs.

    A known word gives its English; a stopword is dropped; an unknown stretch (consecutive characters no
    dictionary word covers) is returned with english None (the caller indexes it as character bigrams)."""
    out: list[tuple[str, str | None]] = []
    unknown = ""
    for word in _segmenter().cut(run, HMM=False):
        if word in TERMS or word in STOPWORDS:
            if unknown:
                out.append((unknown, None))
                unknown = ""
            if word in TERMS:
                out.append((word, TERMS[word]))
        else:
            unknown += word
    if unknown:
        out.append((unknown, None))
    return out


def bigrams(run: str) -> list[str]:
    """Character bigrams of a CJK run (the run itself when it is one character)."""
    if len(run) == 1:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


def split_translation(english: str) -> tuple[str, str]:
    """('primary words', 'related words') of a TERMS value."""
    primary, _, related = english.partition("|")
    return primary.strip(), related.strip()
