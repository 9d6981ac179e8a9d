from hostctl.datapath.rtnl_raw import TC_H_INGRESS, TC_H_ROOT, TcObject, egress_tree, is_kernel_default


def q(h, parent, kind="htb"):
    return TcObject("qdisc", kind, h, parent, b"\x01")


def c(h, parent):
    return TcObject("class", "htb", h, parent, b"\x02")


def test_egress_tree_orders_parents_first_and_drops_ingress():
    objs = [q(0x200000, 0x10020, "pfifo"), c(0x10020, 0x10001), c(0x10001, TC_H_ROOT),
            q(0xFFFF0000, TC_H_INGRESS, "ingress"), q(0x10000, TC_H_ROOT)]
    tree = egress_tree(objs)
    assert [o.handle for o in tree] == [0x10000, 0x10001, 0x10020, 0x200000]
    assert not is_kernel_default(tree)


def test_kernel_default_root_and_json_roundtrip():
    tree = egress_tree([q(0, TC_H_ROOT, "noqueue")])
    assert is_kernel_default(tree) and is_kernel_default([])
    o = c(0x10001, TC_H_ROOT)
    assert TcObject.from_json(o.to_json()) == o
