# Offline datasets for the demo and tests (real datasets come through the preparation stage).
DATA = CFG.data


rule gen_images:
    output:
        directory(os.path.join(CFG.storage["shared"], DATA.images_name)),
    log:
        f"{RES}/logs/gen_images.log",
    benchmark:
        bench("gen_images")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        classes=DATA.images_classes,
        train=DATA.images_train_per_class,
        val=DATA.images_val_per_class,
        size=DATA.images_size,
    shell:
        "wattlife gen-images {output:q} --classes {params.classes} --train-per-class {params.train}"
        " --val-per-class {params.val} --size {params.size} > {log:q} 2>&1"


rule gen_text:
    output:
        directory(os.path.join(CFG.storage["shared"], DATA.text_name)),
    log:
        f"{RES}/logs/gen_text.log",
    benchmark:
        bench("gen_text")
    localrule: CPU_LOCAL
    conda:
        "../envs/analysis.yaml"
    resources:
        **CPU_STEP,
    params:
        words=DATA.text_words,
    shell:
        "wattlife gen-text {output:q} --words {params.words} > {log:q} 2>&1"
