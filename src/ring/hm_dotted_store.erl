%% @doc Algorithm 2 of *DottedDB: Anti-Entropy without Merkle Trees, Deletes without
%% Tombstones* (§IV, "Node-wide Dot-based Clocks"), and Algorithm 3's `strip_causality':
%% how one copy of a replica group keeps its objects. Part of the per-copy core
%% ({@link hm_dotted}); pure over its state (`hm_dotted.hrl').
%%
%% <ul>
%% <li>`update': merge an incoming object with the local one, whose context is filled with
%% the whole node clock (every dot in it is reflected here, so one seen and not live here is
%% obsolete), and store the result; an incoming version found obsolete still counts as seen
%% (node clock, dot-key map).</li>
%% <li>`store': strip the context, drop the key when no value and no context are left, add
%% the version dots to the node clock and the dot-key map, track non-stripped keys, keep the
%% Merkle tree (with Merkle anti-entropy), retire the ids the context names that the group
%% does not know (hm_dotted_churn:retire_unknown/2) and say what reads must show
%% (`show').</li>
%% <li>`strip': the context's entries the node clock's bases cover, and those of retired ids
%% whose every surviving dot is here, are dropped.</li>
%% <li>`fill': the stored context with the node clock's bases of the ids that matter for the
%% object, its version dots, and the closed retired ids' dots.</li>
%% <li>`strip_causality' (Algorithm 3): every non-stripped key whose context the node clock
%% now covers better stored again.</li>
%% </ul>
%%
%% Invariants: every live version's dot is in the node clock; a stored context holds no entry
%% whose dots the node clock's base covers after a strip; a key with neither a value nor a
%% context is not stored; what `show' last said for a key is the values of its versions.
-module(hm_dotted_store).
-include("hm_dotted.hrl").

-export([stored/2, fill/3, closed_cover/2, with_versions/2, update/3, strip_causality/1,
         merge/2, shown/1, entries/2]).

%% The object stored for `Key' (none: no version, an empty context).
-spec stored(term(), #d{}) -> obj().
stored(Key, #d{st = St}) -> maps:get(Key, St, {#{}, hm_node_clock:new()}).

%% fill (Algorithm 2): the context with the node clock's bases of the ids that matter for
%% this object (the group, the object's own ids), and the version dots; and, for a retired
%% id whose gaps are closed here, every dot up to its highest: strip dropped its entry from
%% the stored context, and a copy that still shows a version of it superseded here must see
%% that it is
-spec fill(hm_node_clock:clock(), #{dot() => version()}, #d{}) -> hm_node_clock:clock().
fill(Ctx, Vers, S = #d{nc = NC, peers = Peers}) ->
    Ids = Peers ++ hm_node_clock:replicas(Ctx) ++ [R || {R, _} <- maps:keys(Vers)],
    with_versions(hm_node_clock:join(
                    hm_node_clock:join(Ctx, hm_node_clock:from_vv(
                                              maps:with(Ids, hm_node_clock:base(NC)))),
                    closed_cover(NC, S)), Vers).

%% The dots of the retired ids closed here, up to the highest `NC' holds of each: no other
%% dot of theirs can arrive, so `NC''s gaps in them are dots no copy holds.
-spec closed_cover(hm_node_clock:clock(), #d{}) -> hm_node_clock:clock().
closed_cover(_, #d{closed = []}) -> hm_node_clock:new();
closed_cover(NC, #d{closed = Closed}) ->
    hm_node_clock:from_vv(maps:from_list([{R, M} || R <- Closed,
                                                    M <- [hm_node_clock:max_counter(R, NC)],
                                                    M > 0])).

%% The context with the version dots added.
-spec with_versions(hm_node_clock:clock(), #{dot() => version()}) -> hm_node_clock:clock().
with_versions(Ctx, Vers) -> hm_node_clock:add_dots(maps:keys(Vers), Ctx).

%% update (Algorithm 2): merge an incoming object (its context complete) with the local one
%% (its context filled with the whole node clock, gaps included: every dot in it is reflected
%% here, so one seen and not live here is obsolete) and store the result
-spec update(term(), obj(), #d{}) -> {obj(), #d{}, effects()}.
update(Key, Obj, S = #d{nc = NC}) ->
    {Vers, Ctx} = stored(Key, S),
    Local = {Vers, with_versions(hm_node_clock:join(Ctx, NC), Vers)},
    Merged = merge(Local, Obj),
    %% an incoming version found obsolete is a dot of this key whose effect is here: in the
    %% node clock and the dot-key map, as a stored one
    In = maps:keys(element(1, Obj)),
    DKM = case S#d.ae of
              node_clock -> lists:foldl(fun(D, M) -> M#{D => Key} end, S#d.dkm, In);
              merkle -> S#d.dkm
          end,
    %% what is stored of the context: the local and the incoming ones (the node clock's part
    %% is the node clock's to remember, and fill gives it back)
    {MVers, _} = Merged,
    ToStore = {MVers, hm_node_clock:join(Ctx, element(2, Obj))},
    {S1, Effs} = store(Key, ToStore, S#d{nc = hm_node_clock:add_dots(In, NC), dkm = DKM}),
    {Merged, S1, Effs}.

%% merge (Algorithm 2): versions both keep, or that one keeps and the other never saw
-spec merge(obj(), obj()) -> obj().
merge(A, B) -> hm_dcc:join(A, B).

%% what reads show of versions: their values, in dot order
-spec shown(#{dot() => version()}) -> [term()].
shown(Vers) -> [V || {_, {v, V}} <- lists:sort(maps:to_list(Vers))].

%% store (Algorithm 2)
store(Key, {Vers, Ctx}, S = #d{nc = NC0, st = St, dkm = DKM, nsk = NSK, ae = AE}) ->
    Dots = maps:keys(Vers),
    NC = hm_node_clock:add_dots(Dots, NC0),
    CC = strip(Ctx, NC, S),
    Before = shown(element(1, maps:get(Key, St, {#{}, none}))),
    Empty = shown(Vers) =:= [] andalso hm_node_clock:is_empty(CC),
    St1 = case Empty of
              true -> maps:remove(Key, St);
              false -> St#{Key => {Vers, CC}}
          end,
    DKM1 = case AE of
               node_clock -> lists:foldl(fun(D, M) -> M#{D => Key} end, DKM, Dots);
               merkle -> DKM
           end,
    NSK1 = case hm_node_clock:is_empty(CC) of
               true -> maps:remove(Key, NSK);
               false -> NSK#{Key => true}
           end,
    S1 = hm_dotted_churn:retire_unknown(CC, S#d{nc = NC, st = St1, dkm = DKM1, nsk = NSK1,
                                                tree = tree_update(Key, St1, S)}),
    After = shown(Vers),
    Show = [{show, Key, After} || After =/= Before],
    Ev = [{event, {store, Key, #{entries => entries(Vers, CC), dots => Dots,
                                 stripped => hm_node_clock:is_empty(CC), removed => Empty}}}
          || S#d.events],
    {S1, Show ++ Ev}.

%% strip (Algorithm 2), and the entries of retired ids whose every surviving dot is here
strip(Ctx, NC, #d{closed = []}) -> hm_node_clock:strip_vv(Ctx, NC);
strip(Ctx, NC, #d{closed = Closed}) ->
    Cover = maps:from_list([{R, M} || R <- Closed, M <- [hm_node_clock:max_counter(R, Ctx)],
                                      M > 0]),
    hm_node_clock:strip_vv(Ctx, hm_node_clock:join(NC, hm_node_clock:from_vv(Cover))).

tree_update(_, _, #d{tree = undefined}) -> undefined;
tree_update(Key, St, #d{tree = T}) ->
    case St of
        #{Key := {Vers, _}} ->
            %% what reads show of the key: its versions with a value
            case lists:sort([DV || DV = {_, {v, _}} <- maps:to_list(Vers)]) of
                [] -> hm_merkle:remove(Key, T);
                Live -> hm_merkle:put(Key, hm_merkle:hash(Live), T)
            end;
        _ -> hm_merkle:remove(Key, T)
    end.

%% node ids in an object's clock: its context's and its versions'
-spec entries(#{dot() => version()}, hm_node_clock:clock()) -> non_neg_integer().
entries(Vers, CC) ->
    length(lists:usort(hm_node_clock:replicas(CC) ++ [R || {R, _} <- maps:keys(Vers)])).

%% strip_causality (Algorithm 3); an object whose context the node clock does not cover any
%% better than when it was stored is left as it is (no write to storage)
-spec strip_causality(#d{}) -> {#d{}, effects()}.
strip_causality(S = #d{nsk = NSK, st = St}) ->
    lists:foldl(fun(Key, {Sx, E}) ->
                        case St of
                            #{Key := {_, CC} = Obj} ->
                                case strip(CC, Sx#d.nc, Sx) of
                                    CC -> {Sx, E};
                                    _ -> {Sy, E1} = store(Key, Obj, Sx), {Sy, E ++ E1}
                                end;
                            _ -> {Sx#d{nsk = maps:remove(Key, Sx#d.nsk)}, E}
                        end
                end, {S, []}, lists:sort(maps:keys(NSK))).
