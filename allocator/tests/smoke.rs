use slabcg_allocator::SlabAlloc;

#[global_allocator]
static GLOBAL: SlabAlloc = SlabAlloc::new();

#[test]
fn collections_work() {
    let mut v: Vec<String> = Vec::new();
    for i in 0..100_000 {
        v.push(format!("item {i}"));
    }
    let total: usize = v.iter().map(|s| s.len()).sum();
    assert!(total > 0);
    let mut m = std::collections::HashMap::new();
    for (i, s) in v.iter().enumerate() {
        m.insert(s.clone(), i);
    }
    assert_eq!(m["item 500"], 500);
    drop(v);
    drop(m);
    let s = slabcg_allocator::stats();
    println!("{s}");
}
