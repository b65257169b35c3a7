%% @doc PropEr properties of the causal layer (src/causal): version vectors, the DottedDB node
%% clock, dotted causal containers and the causal delivery buffer. Each property is checked
%% against a naive, independent model (sets of dots, sets of message ids with their causal
%% past), never against the module itself. Run through EUnit; the number of cases per property
%% is `PROPER_NUMTESTS' (default 300), as in hm_crdt_prop.
%%
%% <ul>
%% <li>hm_vv: lattice laws, `leq' versus `join', `meet' as greatest lower bound, `compare',
%%     list round trip, no zero entries.</li>
%% <li>hm_node_clock: the same set semantics as `sets' of dots (contains, to_dots, join,
%%     missing, base, max_counter, next_dot, leq, size), canonical form, lattice laws, binary
%%     round trip and rejection of bad binaries, DottedDB strip/fill (the DottedDB paper,
%%     Algorithm 2).</li>
%% <li>hm_dcc: join laws and the join's dot-level semantics on containers built by random
%%     histories, `join_delta' = `join' for mutator deltas, strip/fill.</li>
%% <li>hm_causal_buffer: random multi-replica schedules with reordering and duplicates (the
%%     Hypermnesia paper, Algorithm 1): exactly-once, causal order, eager delivery, final
%%     state, `advance', `is_message'.</li>
%% </ul>
-module(hm_causal_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_vv_join/0, prop_vv_leq/0, prop_vv_meet/0, prop_vv_compare/0,
         prop_vv_list/0, prop_vv_no_zero/0,
         prop_nc_model/0, prop_nc_wide/0, prop_nc_join_missing_leq/0, prop_nc_canonical/0,
         prop_nc_lattice/0, prop_nc_from_vv/0, prop_nc_binary/0, prop_nc_decode_garbage/0,
         prop_nc_decode_entries/0, prop_nc_strip/0,
         prop_dcc_join/1, prop_dcc_join_delta/0, prop_dcc_strip_fill/1,
         prop_buffer/1, prop_buffer_invariants/0, prop_rcv_ready/0, prop_is_message/0]).

check(Prop) -> hm_crdt_prop:check(Prop).


%%% ================================================================ generators and models

-define(VV_REPLICAS, [a, b, c, d]).
-define(NC_REPLICAS, [a, b, c]).

vv() -> ?LET(L, list({elements(?VV_REPLICAS), range(1, 10)}), maps:from_list(L)).

no_zero(V) -> lists:all(fun(C) -> is_integer(C) andalso C > 0 end, maps:values(V)).

%% Pointwise model of a version vector operation over the union of the keys.
pointwise(F, A, B) ->
    maps:from_list([{R, X} || R <- lists:usort(maps:keys(A) ++ maps:keys(B)),
                              X <- [F(hm_vv:get(R, A), hm_vv:get(R, B))], X > 0]).

model_leq(A, B) -> lists:all(fun({R, N}) -> N =< maps:get(R, B, 0) end, maps:to_list(A)).

%% Few replicas, counters 1..40 skewed to small ones, plus contiguous runs (from 1 or not):
%% gaps, overlaps, non-zero bases and exceptions just above a base are all common.
dot() -> {elements(?NC_REPLICAS), frequency([{3, range(1, 8)}, {2, range(1, 40)}])}.
dots() ->
    ?LET(Parts, list(frequency([{6, {dot, dot()}},
                                {1, {run, elements(?NC_REPLICAS), 1, range(0, 20)}},
                                {1, {run, elements(?NC_REPLICAS), range(2, 40), range(0, 8)}}])),
         lists:append([case P of
                            {dot, D} -> [D];
                            {run, R, Lo, Len} -> [{R, C} || C <- lists:seq(Lo, min(40, Lo + Len))]
                        end || P <- Parts])).

mset(Dots) -> sets:from_list(Dots, [{version, 2}]).
msorted(S) -> lists:sort(sets:to_list(S)).

mbase(R, S) -> mbase(R, S, 0).
mbase(R, S, B) ->
    case sets:is_element({R, B + 1}, S) of
        true -> mbase(R, S, B + 1);
        false -> B
    end.

mmax(R, S) -> lists:max([0 | [C || {R1, C} <- sets:to_list(S), R1 =:= R]]).

mreplicas(S) -> lists:usort([R || {R, _} <- sets:to_list(S)]).

of_replica(R, Dots) -> [D || D = {R1, _} <- Dots, R1 =:= R].

%% Every model query of one clock, as a tagged conjunction so a failure names the check.
nc_model_checks(NC, S) ->
    Rs = ?NC_REPLICAS ++ [d],
    NextOk = lists:all(fun(R) ->
                               {Dot, NC1} = hm_node_clock:next_dot(R, NC),
                               Dot =:= {R, mmax(R, S) + 1} andalso
                                   hm_node_clock:contains(Dot, NC1) andalso
                                   NC1 =:= hm_node_clock:add(Dot, NC) andalso
                                   hm_node_clock:to_dots(NC1) =:= msorted(sets:add_element(Dot, S))
                       end, Rs),
    [{contains, lists:all(fun({R, C}) ->
                                  hm_node_clock:contains({R, C}, NC) =:= sets:is_element({R, C}, S)
                          end, [{R, C} || R <- Rs, C <- lists:seq(1, mmax(R, S) + 2)])},
     {to_dots, hm_node_clock:to_dots(NC) =:= msorted(S)},
     {base_2, [hm_node_clock:base(R, NC) || R <- Rs] =:= [mbase(R, S) || R <- Rs]},
     {base_1, hm_node_clock:base(NC) =:=
          maps:from_list([{R, B} || R <- Rs, B <- [mbase(R, S)], B > 0])},
     {max_counter, [hm_node_clock:max_counter(R, NC) || R <- Rs] =:= [mmax(R, S) || R <- Rs]},
     {next_dot, NextOk},
     {size, hm_node_clock:size(NC) =:= length(mreplicas(S))},
     {replicas, hm_node_clock:replicas(NC) =:= mreplicas(S)},
     {is_empty, hm_node_clock:is_empty(NC) =:= (sets:size(S) =:= 0)}].

conj(Checks) ->
    Failed = [Name || {Name, false} <- Checks],
    ?WHENFAIL(io:format(user, "failed checks: ~p~n", [Failed]), Failed =:= []).

%%% ================================================================ hm_vv

prop_vv_join() ->
    ?SAFE_FORALL({A, B, C}, {vv(), vv(), vv()},
            begin
                J = fun hm_vv:join/2,
                conj([{commutative, J(A, B) =:= J(B, A)},
                      {associative, J(J(A, B), C) =:= J(A, J(B, C))},
                      {idempotent, J(A, A) =:= A},
                      {identity, J(A, hm_vv:new()) =:= A},
                      {pointwise_max, J(A, B) =:= pointwise(fun max/2, A, B)},
                      {no_zero, no_zero(J(A, B))}])
            end).

prop_vv_leq() ->
    ?SAFE_FORALL({A, B, X}, {vv(), vv(), vv()},
            begin
                Above = hm_vv:join(A, X),       % so that the `true' case is frequent
                conj([{leq_iff_join, hm_vv:leq(A, B) =:= (hm_vv:join(A, B) =:= B)},
                      {leq_iff_join_above, hm_vv:leq(A, Above) =:= (hm_vv:join(A, Above) =:= Above)},
                      {leq_above, hm_vv:leq(A, Above)},
                      {leq_model, hm_vv:leq(A, B) =:= model_leq(A, B)},
                      {contains, lists:all(fun({R, N}) ->
                                                   hm_vv:contains({R, N}, B) =:= (N =< hm_vv:get(R, B))
                                           end, [{R, N} || R <- ?VV_REPLICAS, N <- lists:seq(1, 11)])}])
            end).

prop_vv_meet() ->
    ?SAFE_FORALL({A, B, C}, {vv(), vv(), vv()},
            begin
                M = hm_vv:meet(A, B),
                %% a C below both, built without meet/2
                Below = maps:from_list([{R, X} || {R, N} <- maps:to_list(C),
                                                  X <- [min(N, min(hm_vv:get(R, A), hm_vv:get(R, B)))],
                                                  X > 0]),
                conj([{lower_bound, hm_vv:leq(M, A) andalso hm_vv:leq(M, B)},
                      {greatest, hm_vv:leq(Below, M)},
                      {greatest_random, not (hm_vv:leq(C, A) andalso hm_vv:leq(C, B))
                           orelse hm_vv:leq(C, M)},
                      {pointwise_min, M =:= pointwise(fun min/2, A, B)},
                      {commutative, M =:= hm_vv:meet(B, A)},
                      {absorption, hm_vv:meet(A, hm_vv:join(A, B)) =:= A andalso
                           hm_vv:join(A, M) =:= A},
                      {no_zero, no_zero(M)}])
            end).

prop_vv_compare() ->
    ?SAFE_FORALL({A, B0, X, Pick}, {vv(), vv(), vv(), range(1, 3)},
            begin
                B = case Pick of
                        1 -> B0;
                        2 -> hm_vv:join(A, X);
                        3 -> A
                    end,
                Expected = case {hm_vv:leq(A, B), hm_vv:leq(B, A)} of
                               {true, true} -> equal;
                               {true, false} -> before;
                               {false, true} -> 'after';
                               {false, false} -> concurrent
                           end,
                conj([{compare, hm_vv:compare(A, B) =:= Expected},
                      {equal_is_identical, (Expected =:= equal) =:= (A =:= B)},
                      {descends, hm_vv:descends(B, A) =:= hm_vv:leq(A, B)},
                      {concurrent, hm_vv:concurrent(A, B) =:= (Expected =:= concurrent)}])
            end).

prop_vv_list() ->
    ?SAFE_FORALL({V, L}, {vv(), list({elements(?VV_REPLICAS), range(0, 10)})},
            begin
                Model = lists:usort([{R, lists:max([N || {R1, N} <- L, R1 =:= R])}
                                     || {R, _} <- L]),
                FromL = hm_vv:from_list(L),
                conj([{round_trip, hm_vv:from_list(hm_vv:to_list(V)) =:= V},
                      {sorted, hm_vv:to_list(V) =:= lists:sort(maps:to_list(V))},
                      {duplicates_joined, hm_vv:to_list(FromL) =:= [E || E = {_, N} <- Model, N > 0]},
                      {size, hm_vv:size(FromL) =:= length([N || {_, N} <- Model, N > 0])},
                      {no_zero, no_zero(FromL)}])
            end).

%% Any sequence of vector operations keeps every entry positive (absent means 0).
vv_op() ->
    oneof([{increment, elements(?VV_REPLICAS)},
           {set, elements(?VV_REPLICAS), range(0, 5)},
           {join, vv()}, {meet, vv()},
           {from_list, list({elements(?VV_REPLICAS), range(0, 5)})}]).

prop_vv_no_zero() ->
    ?SAFE_FORALL(Ops, list(vv_op()),
            begin
                Apply = fun({increment, R}, V) -> hm_vv:increment(R, V);
                           ({set, R, N}, V) -> hm_vv:set(R, N, V);
                           ({join, W}, V) -> hm_vv:join(V, W);
                           ({meet, W}, V) -> hm_vv:meet(V, W);
                           ({from_list, L}, V) -> hm_vv:join(V, hm_vv:from_list(L))
                        end,
                {_, Ok} = lists:foldl(fun(Op, {V, Ok}) ->
                                              V1 = Apply(Op, V),
                                              {V1, Ok andalso no_zero(V1)}
                                      end, {hm_vv:new(), true}, Ops),
                Ok
            end).

%%% ================================================================ hm_node_clock

prop_nc_model() ->
    ?SAFE_FORALL(Dots, dots(),
            conj(nc_model_checks(hm_node_clock:from_dots(Dots), mset(Dots)))).

%% Long runs and counters past 64: exercises the 32-bit steps of the bit helpers.
wide_dots() ->
    ?LET(Runs, list({elements(?NC_REPLICAS), range(1, 300), range(0, 80)}),
         [{R, C} || {R, Lo, Len} <- Runs, C <- lists:seq(Lo, Lo + Len)]).

prop_nc_wide() ->
    ?SAFE_FORALL({DA, DB}, {wide_dots(), wide_dots()},
            begin
                A = hm_node_clock:from_dots(DA), B = hm_node_clock:from_dots(DB),
                SA = mset(DA), SB = mset(DB),
                U = sets:union(SA, SB),
                conj(nc_model_checks(A, SA) ++
                         [{join, hm_node_clock:to_dots(hm_node_clock:join(A, B)) =:= msorted(U)},
                          {join_canonical, hm_node_clock:join(A, B) =:= hm_node_clock:from_dots(DA ++ DB)},
                          {leq, hm_node_clock:leq(A, B) =:= sets:is_subset(SA, SB)},
                          {binary, hm_node_clock:decode(hm_node_clock:encode(A)) =:= {ok, A}}])
            end).

prop_nc_join_missing_leq() ->
    ?SAFE_FORALL({DA, DB}, {dots(), dots()},
            begin
                A = hm_node_clock:from_dots(DA), B = hm_node_clock:from_dots(DB),
                SA = mset(DA), SB = mset(DB),
                AB = hm_node_clock:join(A, B),
                conj([{join_union, hm_node_clock:to_dots(AB) =:= msorted(sets:union(SA, SB))},
                      {missing, hm_node_clock:missing(A, B) =:= msorted(sets:subtract(SA, SB))},
                      {missing_rev, hm_node_clock:missing(B, A) =:= msorted(sets:subtract(SB, SA))},
                      {missing_join, hm_node_clock:missing(A, AB) =:= []},
                      {leq, hm_node_clock:leq(A, B) =:= sets:is_subset(SA, SB)},
                      {leq_join, hm_node_clock:leq(A, AB) andalso hm_node_clock:leq(B, AB)}])
            end).

%% The same set of dots gives the identical term, whatever the insertion order or split.
prop_nc_canonical() ->
    ?SAFE_FORALL(Tagged, list({integer(), elements([left, right, both]), dot()}),
            begin
                Dots = [D || {_, _, D} <- Tagged],
                Shuffled = [D || {_, _, D} <- lists:sort(Tagged)],
                Left = [D || {_, Side, D} <- Tagged, Side =/= right],
                Right = [D || {_, Side, D} <- Tagged, Side =/= left],
                NC = hm_node_clock:from_dots(Dots),
                Add1 = lists:foldl(fun hm_node_clock:add/2, hm_node_clock:new(), Shuffled),
                conj([{shuffled, hm_node_clock:from_dots(Shuffled) =:= NC},
                      {reversed, hm_node_clock:from_dots(lists:reverse(Dots)) =:= NC},
                      {one_by_one, Add1 =:= NC},
                      {split_join, hm_node_clock:join(hm_node_clock:from_dots(Left),
                                                      hm_node_clock:from_dots(Right)) =:= NC},
                      {split_add, hm_node_clock:add_dots(Right, hm_node_clock:from_dots(Left)) =:= NC},
                      {to_dots, hm_node_clock:from_dots(hm_node_clock:to_dots(NC)) =:= NC},
                      {empty, (hm_node_clock:from_dots([]) =:= hm_node_clock:new())}])
            end).

prop_nc_lattice() ->
    ?SAFE_FORALL({DA, DB, DC}, {dots(), dots(), dots()},
            begin
                [A, B, C] = [hm_node_clock:from_dots(D) || D <- [DA, DB, DC]],
                J = fun hm_node_clock:join/2,
                conj([{commutative, J(A, B) =:= J(B, A)},
                      {associative, J(J(A, B), C) =:= J(A, J(B, C))},
                      {idempotent, J(A, A) =:= A},
                      {identity, J(A, hm_node_clock:new()) =:= A}])
            end).

prop_nc_from_vv() ->
    ?SAFE_FORALL(V, vv(),
            begin
                NC = hm_node_clock:from_vv(V),
                conj([{to_dots, hm_node_clock:to_dots(NC) =:=
                           lists:sort([{R, C} || {R, N} <- maps:to_list(V), C <- lists:seq(1, N)])},
                      {base, hm_node_clock:base(NC) =:= V},
                      {canonical, hm_node_clock:from_dots(hm_node_clock:to_dots(NC)) =:= NC}])
            end).

prop_nc_binary() ->
    ?SAFE_FORALL({Dots, Pos, Byte}, {dots(), range(0, 3), range(0, 255)},
            begin
                NC = hm_node_clock:from_dots(Dots),
                Bin = hm_node_clock:encode(NC),
                Truncated = [binary:part(Bin, 0, L) || L <- lists:seq(0, byte_size(Bin) - 1)],
                <<Pre:Pos/binary, Old, Post/binary>> = Bin,
                BadMagic = <<Pre/binary, (Old bxor (Byte bor 1)), Post/binary>>,
                conj([{round_trip, hm_node_clock:decode(Bin) =:= {ok, NC}},
                      {truncated, lists:all(fun(T) -> hm_node_clock:decode(T) =:= {error, bad_clock} end,
                                            Truncated)},
                      {bad_magic_or_version, hm_node_clock:decode(BadMagic) =:= {error, bad_clock}},
                      {trailing, hm_node_clock:decode(<<Bin/binary, Byte>>) =:= {error, bad_clock}}])
            end).

%% Random binaries: an error, or (rarely, behind a right header) a canonical clock; never a
%% crash.
prop_nc_decode_garbage() ->
    ?SAFE_FORALL({Garbage, Tail}, {binary(), binary()},
            begin
                Headed = <<"HNC", 1, Tail/binary>>,
                GarbageOk = case Garbage of
                                <<"HNC", 1, _/binary>> -> true;
                                _ -> hm_node_clock:decode(Garbage) =:= {error, bad_clock}
                            end,
                HeadedOk = case hm_node_clock:decode(Headed) of
                               {error, bad_clock} -> true;
                               {ok, C} -> hm_node_clock:decode(hm_node_clock:encode(C)) =:= {ok, C}
                                              andalso hm_node_clock:join(C, C) =:= C
                           end,
                conj([{garbage, GarbageOk}, {headed, HeadedOk}])
            end).

%% Hand-built encodings (the format documented in hm_node_clock:encode/1): decode accepts
%% exactly the canonical ones (right count, distinct replicas, compacted, non-empty entries).
prop_nc_decode_entries() ->
    ?SAFE_FORALL({Entries, CountDelta},
            {list({elements(?NC_REPLICAS), range(0, 6), range(0, 40)}),
             frequency([{4, 0}, {1, range(-1, 1)}])},
            begin
                Count = max(length(Entries) + CountDelta, 0),
                Body = [[varint(byte_size(Id)), Id, varint(B), varint(M)]
                        || {R, B, M} <- Entries, Id <- [term_to_binary(R)]],
                Bin = iolist_to_binary([<<"HNC", 1>>, varint(Count) | Body]),
                Rs = [R || {R, _, _} <- Entries],
                Canonical = Count =:= length(Entries) andalso
                    lists:usort(Rs) =:= Rs andalso          % sorted, no duplicates
                    lists:all(fun({_, B, M}) -> M band 1 =:= 0 andalso (B > 0 orelse M > 0) end,
                              Entries),
                Dots = [{R, C} || {R, B, M} <- Entries,
                                  C <- lists:seq(1, B) ++
                                      [B + 1 + I || I <- lists:seq(0, 6), (M bsr I) band 1 =:= 1]],
                Res = hm_node_clock:decode(Bin),
                ?WHENFAIL(io:format(user, "bin ~p -> ~p, canonical ~p~n", [Bin, Res, Canonical]),
                          case Canonical of
                              true -> Res =:= {ok, hm_node_clock:from_dots(Dots)};
                              false -> Res =:= {error, bad_clock}
                          end)
            end).

varint(N) when N < 128 -> <<N>>;
varint(N) -> <<1:1, (N band 127):7, (varint(N bsr 7))/binary>>.

%% DottedDB strip (the DottedDB paper, Algorithm 2): an entry is dropped iff all its dots are
%% within the node clock's base for that replica; kept entries are unchanged; filling from
%% the bases covers the original context.
prop_nc_strip() ->
    ?SAFE_FORALL({DCtx, DNC, Containing}, {dots(), dots(), boolean()},
            begin
                Ctx = hm_node_clock:from_dots(DCtx),
                NC = case Containing of
                         true -> hm_node_clock:from_dots(DCtx ++ DNC);
                         false -> hm_node_clock:from_dots(DNC)
                     end,
                SNC = case Containing of
                          true -> mset(DCtx ++ DNC);
                          false -> mset(DNC)
                      end,
                Stripped = hm_node_clock:strip_vv(Ctx, NC),
                CtxDots = hm_node_clock:to_dots(Ctx),
                StrippedDots = hm_node_clock:to_dots(Stripped),
                PerReplica =
                    lists:all(
                      fun(R) ->
                              Mine = of_replica(R, CtxDots),
                              AllInBase = lists:all(fun({_, C}) -> C =< mbase(R, SNC) end, Mine),
                              case AllInBase of
                                  true -> of_replica(R, StrippedDots) =:= [];
                                  false -> of_replica(R, StrippedDots) =:= Mine
                              end
                      end, ?NC_REPLICAS),
                Filled = hm_node_clock:join(Stripped,
                                            hm_node_clock:from_vv(hm_node_clock:base(NC))),
                conj([{fill_covers, hm_node_clock:leq(Ctx, Filled)},
                      {only_drops, hm_node_clock:leq(Stripped, Ctx)},
                      {per_replica, PerReplica}])
            end).

%%% ================================================================ hm_dcc

-define(IDS, {a, b, c}).

elem() -> elements([x, y, z]).

%% awset: dot map of dot sets (the reference type); mv: a flat dot fun (multi-value register
%% written with a fresh dot that supersedes every value seen).
cont_op(awset) ->
    oneof([{add, elem()}, {remove, elem()}, {add_all, list(elem())}, {remove_all, list(elem())}]);
cont_op(mv) ->
    oneof([{write, range(1, 3)}, clear]).

cont_step(Kind) ->
    frequency([{4, {update, range(1, 3), cont_op(Kind)}},
               {2, {merge, range(1, 3), range(1, 3)}}]).

empty(awset) -> hm_dcc:new(hm_awset:empty_store());
empty(mv) -> hm_dcc:new(#{}).

update(awset, Op, R, X) -> hm_awset:update(Op, R, X);
update(mv, {write, V}, R, X) ->
    {Dot, C1} = hm_node_clock:next_dot(R, hm_dcc:context(X)),
    {#{Dot => V}, C1};
update(mv, clear, _R, X) -> {#{}, hm_dcc:context(X)}.

%% The three replicas' containers after a random history of updates and merges.
containers(Kind) ->
    ?LET(Steps, list(cont_step(Kind)), run_history(Kind, Steps)).

run_history(Kind, Steps) ->
    S0 = maps:from_list([{I, empty(Kind)} || I <- [1, 2, 3]]),
    S = lists:foldl(fun({update, I, Op}, Acc) ->
                            Acc#{I := update(Kind, Op, element(I, ?IDS), maps:get(I, Acc))};
                       ({merge, I, J}, Acc) ->
                            Acc#{I := hm_dcc:join(maps:get(I, Acc), maps:get(J, Acc))}
                    end, S0, Steps),
    [maps:get(I, S) || I <- [1, 2, 3]].

%% Every (dot, where) pair of a store: the key it lives under (dot map) or its value (dot fun).
entries({dm, M}) -> lists:sort([{D, K} || {K, S} <- maps:to_list(M), D <- maps:keys(S)]);
entries(F) -> lists:sort(maps:to_list(F)).

prop_dcc_join(Kind) ->
    ?SAFE_FORALL([A, B, C], containers(Kind),
            begin
                J = fun hm_dcc:join/2,
                AB = J(A, B),
                %% dot-level model: keep a dot both keep, or one keeps and the other never saw
                {SA, CA} = A, {SB, CB} = B,
                Keep = fun(D) ->
                               InA = lists:keymember(D, 1, entries(SA)),
                               InB = lists:keymember(D, 1, entries(SB)),
                               (InA andalso InB) orelse
                                   (InA andalso not hm_node_clock:contains(D, CB)) orelse
                                   (InB andalso not hm_node_clock:contains(D, CA))
                       end,
                Model = lists:usort([E || E = {D, _} <- entries(SA) ++ entries(SB), Keep(D)]),
                StoreDots = hm_dcc:dots(AB),
                conj([{commutative, J(A, B) =:= J(B, A)},
                      {associative, J(J(A, B), C) =:= J(A, J(B, C))},
                      {idempotent, J(A, A) =:= A},
                      {identity, J(A, empty(Kind)) =:= A andalso J(empty(Kind), A) =:= A},
                      {dot_model, entries(hm_dcc:store(AB)) =:= Model},
                      {context_union, hm_dcc:context(AB) =:=
                           hm_node_clock:join(hm_dcc:context(A), hm_dcc:context(B))},
                      {dots_in_context, lists:all(fun(D) -> hm_node_clock:contains(D, hm_dcc:context(AB)) end,
                                                  StoreDots)},
                      {dot_once, length(StoreDots) =:= length(lists:usort(StoreDots))},
                      {no_empty_nested, no_empty_nested(hm_dcc:store(AB))},
                      {normalized, hm_dcc:normalize(AB) =:= AB}])
            end).

no_empty_nested({dm, M}) -> lists:all(fun(S) -> not hm_dcc:is_empty_store(S) andalso
                                                    no_empty_nested(S) end, maps:values(M));
no_empty_nested(_) -> true.

%% join_delta(X, D) =:= join(X, D) for a delta of X's own replica; and at any other replica of
%% the same history (how the delta flavor applies a received delta).
prop_dcc_join_delta() ->
    ?SAFE_FORALL({States, Op, I}, {containers(awset), cont_op(awset), range(1, 3)},
            begin
                X = lists:nth(I, States),
                D = hm_awset:delta(Op, element(I, ?IDS), X),
                conj([{own, hm_dcc:join_delta(X, D) =:= hm_dcc:join(X, D)},
                      {others, lists:all(fun(Y) -> hm_dcc:join_delta(Y, D) =:= hm_dcc:join(Y, D) end,
                                         States)}])
            end).

prop_dcc_strip_fill(Kind) ->
    ?SAFE_FORALL({States, I, Extra}, {containers(Kind), range(1, 3), dots()},
            begin
                X = lists:nth(I, States),
                %% a node clock holding X's context (and what other replicas and strangers did)
                NC = lists:foldl(fun(S, Acc) -> hm_node_clock:join(hm_dcc:context(S), Acc) end,
                                 hm_node_clock:from_dots(Extra), States),
                Stripped = hm_dcc:strip(X, NC),
                Filled = hm_dcc:fill(Stripped, NC),
                conj([{covers, hm_node_clock:leq(hm_dcc:context(X), hm_dcc:context(Filled))},
                      {store_kept, hm_dcc:store(Stripped) =:= hm_dcc:store(X) andalso
                           hm_dcc:store(Filled) =:= hm_dcc:store(X)},
                      {only_drops, hm_node_clock:leq(hm_dcc:context(Stripped), hm_dcc:context(X))},
                      {fill_is_nc_base, hm_node_clock:leq(hm_dcc:context(Filled), NC)}])
            end).

%%% ================================================================ hm_causal_buffer

-define(BUF_IDS, {a, b, c, d, e}).

buf_step(Advance) ->
    frequency([{3, {send, range(1, 5)}},
               {6, {deliver, non_neg_integer(), range(1, 5)}}]
              ++ [{2, {advance, range(1, 5), range(1, 5)}} || Advance]).

%% N replicas send, receive in any order with duplicates (and, with Advance, catch up to
%% another replica's delivered vector); then every message goes to every replica in a random
%% order with duplicates.
prop_buffer(Advance) ->
    ?SAFE_FORALL({N, Steps, Seed}, {range(2, 5), ?SIZED(Size, resize(3 * Size, list(buf_step(Advance)))),
                               integer()},
            begin
                Res = run_buffer(N, Steps, Seed),
                ?WHENFAIL(io:format(user, "buffer: ~p~n", [Res]), Res =:= ok)
            end).

sets_new() -> sets:new([{version, 2}]).

%% Model, per replica: cb (the buffer), dl (ids delivered, own sends and catch-ups included),
%% rc (ids received, duplicates ignored), log (ids in delivery order), got (ids returned by
%% rcv_msg/advance), cov (ids counted by an advance/2 catch-up). Global: msgs (Id => {Msg, Past}), order (ids in send order).
run_buffer(N, Steps, Seed) ->
    Rep = fun(I) -> #{cb => hm_causal_buffer:new(), dl => sets_new(), rc => sets_new(),
                      log => [], got => sets_new(), cov => sets_new(),
                      id => element(I, ?BUF_IDS)} end,
    S0 = #{n => N, reps => maps:from_list([{I, Rep(I)} || I <- lists:seq(1, N)]),
           msgs => #{}, order => [], next => 1},
    try
        S1 = lists:foldl(fun(Step, S) -> buf_exec(Step, S) end, S0, Steps),
        %% final order: a random key per (receiver, message, copy), one or two copies each;
        %% an explicit rand state, so PropEr's own generator is left alone
        Pairs = [{J, Id} || J <- lists:seq(1, N), Id <- maps:get(order, S1)],
        {Final, _} = lists:foldl(fun({J, Id}, {Acc, R0}) ->
                                         {Copies, R1} = rand:uniform_s(2, R0),
                                         {Keys, R2} = lists:mapfoldl(fun(_, R) -> rand:uniform_s(R) end,
                                                                     R1, lists:seq(1, Copies)),
                                         {[{K, J, Id} || K <- Keys] ++ Acc, R2}
                                 end, {[], rand:seed_s(exsss, {Seed, 7, 11})}, Pairs),
        S2 = lists:foldl(fun({_, J, Id}, S) -> buf_deliver(J, Id, S) end, S1, lists:sort(Final)),
        buf_final(S2)
    catch throw:Why -> Why
    end.

buf_exec({send, I0}, S = #{n := N, reps := Reps, msgs := Msgs, order := Order, next := Id}) ->
    I = (I0 - 1) rem N + 1,
    P = #{cb := CB, dl := Dl, log := Log, id := R} = maps:get(I, Reps),
    {Ts, CB1} = hm_causal_buffer:send_msg(R, CB),
    Dl1 = sets:add_element(Id, Dl),
    Msgs1 = Msgs#{Id => {{R, Ts, {payload, Id}}, Dl}},
    Model = vv_of(Dl1, Msgs1),
    [throw({send_ts, R, Ts, Model}) || Ts =/= Model],
    [throw({send_delivered, R, hm_causal_buffer:delivered(CB1), Ts})
     || hm_causal_buffer:delivered(CB1) =/= Ts],
    S#{reps := Reps#{I := P#{cb := CB1, dl := Dl1, log := Log ++ [Id]}},
       msgs := Msgs1, order := Order ++ [Id], next := Id + 1};
buf_exec({deliver, _, _}, S = #{order := []}) -> S;
buf_exec({deliver, K, J0}, S = #{n := N, order := Order}) ->
    buf_deliver((J0 - 1) rem N + 1, lists:nth(K rem length(Order) + 1, Order), S);
buf_exec({advance, J0, K0}, S = #{n := N, reps := Reps, msgs := Msgs}) ->
    J = (J0 - 1) rem N + 1, K = (K0 - 1) rem N + 1,
    P = #{cb := CB, dl := Dl} = maps:get(J, Reps),
    #{cb := CBK, dl := DlK} = maps:get(K, Reps),
    V = hm_causal_buffer:delivered(CBK),
    {Out, CB1} = hm_causal_buffer:advance(V, CB),
    Covered = sets:subtract(DlK, Dl),
    %% covered messages count as delivered, in some order that respects happened-before
    CoveredOrder = [Id || {_, Id} <- lists:sort([{vv_sum(ts(Id, Msgs)), Id}
                                                  || Id <- sets:to_list(Covered)])],
    P1 = P#{dl := sets:union(Dl, DlK), log := maps:get(log, P) ++ CoveredOrder,
            cov := sets:union(maps:get(cov, P), Covered)},
    check_returned(J, {advance, J, K}, Out, CB1, P1, S).

%% Receive message Id at replica J and compare with the model.
buf_deliver(J, Id, S = #{reps := Reps, msgs := Msgs}) ->
    P = #{cb := CB, dl := Dl, rc := Rc} = maps:get(J, Reps),
    {Msg, Past} = maps:get(Id, Msgs),
    D0 = hm_causal_buffer:delivered(CB),
    IsDup = sets:is_element(Id, Dl),
    [throw({is_duplicate, J, Msg, D0}) || hm_causal_buffer:is_duplicate(Msg, D0) =/= IsDup],
    [throw({is_ready, J, Msg, D0})
     || hm_causal_buffer:is_ready(Msg, D0) =/= (not IsDup andalso sets:is_subset(Past, Dl))],
    {Out, CB1} = hm_causal_buffer:rcv_msg(Msg, CB),
    %% as a busy table receives it (hm_tcsb:receive_op/2): rcv_ready/2 first, which answers
    %% what rcv_msg/2 does, for every ready message naming only replicas delivered from that
    %% has no buffered twin
    Fast = not IsDup andalso sets:is_subset(Past, Dl)
        andalso lists:all(fun(K) -> is_map_key(K, D0) end, maps:keys(element(2, Msg)))
        andalso [Pm || Pm = {O, PTs, _} <- hm_causal_buffer:pending(CB), O =:= element(1, Msg),
                      maps:get(O, PTs) =:= maps:get(O, element(2, Msg))] =:= [],
    case hm_causal_buffer:rcv_ready(Msg, CB) of
        not_ready when Fast -> throw({rcv_ready_declined, J, Msg, D0});
        not_ready -> ok;
        {Out, CB1} when Fast -> ok;
        Other -> throw({rcv_ready, J, Msg, D0, Other, {Out, CB1}})
    end,
    P1 = case IsDup of
             true -> P;
             false -> P#{rc := sets:add_element(Id, Rc)}
         end,
    check_returned(J, {deliver, J, Id}, Out, CB1, P1, S).

%% What the buffer returned must be exactly what became ready in the model (every received,
%% undelivered message whose causal past is delivered, transitively), each message after its
%% past; delivered/pending must match the model.
check_returned(J, Where, Out, CB1, P = #{dl := Dl, rc := Rc, log := Log, got := Got},
               S = #{reps := Reps, msgs := Msgs}) ->
    Ready = closure(Dl, Rc, Msgs),
    OutIds = [Id || {_, _, {payload, Id}} <- Out],
    [throw({wrong_messages, Where, OutIds, msorted(Ready)})
     || lists:sort(OutIds) =/= msorted(Ready)],
    [throw({returned_twice, Where, OutIds, msorted(Got)})
     || length(lists:usort(OutIds)) =/= length(OutIds) orelse
            lists:any(fun(Id) -> sets:is_element(Id, Got) end, OutIds)],
    [throw({tampered, Where, Out}) || [M || {M, _} <- [maps:get(Id, Msgs) || Id <- OutIds]] =/= Out],
    Dl1 = lists:foldl(
            fun(Id, D) ->
                    {_, Past} = maps:get(Id, Msgs),
                    [throw({before_its_past, Where, Id, msorted(Past), msorted(D)})
                     || not sets:is_subset(Past, D)],
                    sets:add_element(Id, D)
            end, Dl, OutIds),
    Pending = msorted(sets:subtract(Rc, Dl1)),
    PendingImpl = lists:sort([Id || {_, _, {payload, Id}} <- hm_causal_buffer:pending(CB1)]),
    [throw({delivered, Where, hm_causal_buffer:delivered(CB1), vv_of(Dl1, Msgs)})
     || hm_causal_buffer:delivered(CB1) =/= vv_of(Dl1, Msgs)],
    [throw({pending, Where, PendingImpl, Pending}) || PendingImpl =/= Pending],
    [throw({pending_count, Where, hm_causal_buffer:pending_count(CB1), length(Pending)})
     || hm_causal_buffer:pending_count(CB1) =/= length(Pending)],
    S#{reps := Reps#{J := P#{cb := CB1, dl := Dl1, log := Log ++ OutIds,
                             got := sets:union(Got, sets:from_list(OutIds, [{version, 2}]))}}}.

%% Received, undelivered ids whose past becomes delivered, repeatedly.
closure(Dl, Rc, Msgs) -> closure(Dl, Rc, Msgs, sets_new()).
closure(Dl, Rc, Msgs, Acc) ->
    New = [Id || Id <- sets:to_list(sets:subtract(Rc, Dl)),
                 sets:is_subset(element(2, maps:get(Id, Msgs)), Dl)],
    case New of
        [] -> Acc;
        _ -> closure(sets:union(Dl, sets:from_list(New, [{version, 2}])), Rc, Msgs,
                     sets:union(Acc, sets:from_list(New, [{version, 2}])))
    end.

ts(Id, Msgs) -> element(2, element(1, maps:get(Id, Msgs))).

vv_sum(V) -> lists:sum(maps:values(V)).

%% The vector of a set of ids: how many messages of each origin (independent of hm_vv).
vv_of(Ids, Msgs) ->
    lists:foldl(fun(Id, V) ->
                        {{R, _, _}, _} = maps:get(Id, Msgs),
                        V#{R => maps:get(R, V, 0) + 1}
                end, #{}, sets:to_list(Ids)).

buf_final(#{reps := Reps, msgs := Msgs, order := Order}) ->
    All = lists:foldl(fun(Id, V) -> hm_vv:join(V, ts(Id, Msgs)) end, hm_vv:new(), Order),
    AllIds = sets:from_list(Order, [{version, 2}]),
    [throw({final_vv_model, All, vv_of(AllIds, Msgs)}) || All =/= vv_of(AllIds, Msgs)],
    maps:foreach(
      fun(J, #{cb := CB, log := Log, got := Got, cov := Cov, id := R}) ->
              %% every message of another origin returned exactly once (returned twice is
              %% caught when it happens), unless a catch-up counted it
              Others = [Id || Id <- Order, element(1, element(1, maps:get(Id, Msgs))) =/= R],
              [throw({not_exactly_once, J, msorted(Got), msorted(Cov), Others})
               || msorted(sets:union(Got, Cov)) =/= lists:sort(Others) orelse
                      sets:size(sets:intersection(Got, Cov)) =/= 0],
              [throw({log_not_complete, J, Log}) || lists:sort(Log) =/= lists:sort(Order)],
              hb_order(J, Log, Msgs),
              [throw({final_delivered, J, hm_causal_buffer:delivered(CB), All})
               || hm_causal_buffer:delivered(CB) =/= All],
              [throw({final_pending, J, hm_causal_buffer:pending_count(CB)})
               || hm_causal_buffer:pending_count(CB) =/= 0 orelse
                      hm_causal_buffer:pending(CB) =/= []]
      end, Reps),
    ok.

%% If A's timestamp is =< B's, A comes first.
hb_order(J, Log, Msgs) ->
    Indexed = lists:zip(lists:seq(1, length(Log)), Log),
    [throw({hb_order, J, A, B, ts(A, Msgs), ts(B, Msgs)})
     || {I, A} <- Indexed, {K, B} <- Indexed, K < I, hm_vv:leq(ts(A, Msgs), ts(B, Msgs))],
    ok.

%% Arbitrary well-formed messages (even inconsistent ones) never crash the buffer and keep its
%% documented invariants: delivered only grows, returned messages were ready in turn, the
%% buffer holds only messages that are neither delivered nor ready.
valid_message() ->
    ?LET({R, Ts, P}, {elements([a, b, c]), vv(), range(1, 3)},
         ?LET(Own, range(1, 5), {R, Ts#{R => Own}, P})).

prop_buffer_invariants() ->
    ?SAFE_FORALL(Msgs, list(valid_message()),
            begin
                {_, Ok} =
                    lists:foldl(
                      fun(M, {CB, true}) ->
                              D0 = hm_causal_buffer:delivered(CB),
                              {Out, CB1} = hm_causal_buffer:rcv_msg(M, CB),
                              D1 = hm_causal_buffer:delivered(CB1),
                              {DEnd, InTurn} =
                                  lists:foldl(fun(O = {R, _, _}, {D, Ok}) ->
                                                      {hm_vv:increment(R, D),
                                                       Ok andalso hm_causal_buffer:is_ready(O, D)}
                                              end, {D0, true}, Out),
                              Pend = hm_causal_buffer:pending(CB1),
                              {CB1, hm_vv:leq(D0, D1) andalso InTurn andalso DEnd =:= D1 andalso
                                   hm_causal_buffer:pending_count(CB1) =:= length(Pend) andalso
                                   lists:all(fun(P) ->
                                                     not hm_causal_buffer:is_duplicate(P, D1) andalso
                                                         not hm_causal_buffer:is_ready(P, D1)
                                             end, Pend)};
                         (_, Acc) -> Acc
                      end, {hm_causal_buffer:new(), true}, Msgs),
                Ok
            end).

%% rcv_ready/2 answers exactly what rcv_msg/2 would, and answers (is not `not_ready') for
%% every message that is ready, names only replicas delivered from, and has no buffered twin
%% (a message of its origin filed at its number), under arbitrary, inconsistent messages
%% (prop_buffer/1 checks the same on histories a cluster can make).
small_message() ->
    ?LET({R, L, Own, P}, {elements([a, b, c]), list({elements([a, b, c]), range(1, 3)}),
                          range(1, 4), range(1, 2)},
         {R, (maps:from_list(L))#{R => Own}, P}).

prop_rcv_ready() ->
    ?SAFE_FORALL(Msgs, list(small_message()),
            begin
                {_, Ok} =
                    lists:foldl(
                      fun(M = {R, Ts, _}, {CB, true}) ->
                              D = hm_causal_buffer:delivered(CB),
                              Expected = hm_causal_buffer:rcv_msg(M, CB),
                              Twin = [P || P = {O, PTs, _} <- hm_causal_buffer:pending(CB),
                                           O =:= R, maps:get(O, PTs) =:= maps:get(R, Ts)],
                              Should = hm_causal_buffer:is_ready(M, D)
                                  andalso lists:all(fun(K) -> is_map_key(K, D) end,
                                                    maps:keys(Ts))
                                  andalso Twin =:= [],
                              Agrees = case hm_causal_buffer:rcv_ready(M, CB) of
                                           not_ready -> not Should;
                                           Got -> Should andalso Got =:= Expected
                                       end,
                              {element(2, Expected), Agrees};
                         (_, Acc) -> Acc
                      end, {hm_causal_buffer:new(), true}, Msgs),
                Ok
            end).

%% is_message/1 accepts well-formed messages and rejects (never crashes on) anything else.
bad_counter() -> oneof([0, -1, 1.0, a, "1", {1}]).

malformed() ->
    ?LET({M = {R, Ts, P}, Other, Bad}, {valid_message(), elements([x, y]), bad_counter()},
         oneof([{R, elements([[], a, {Ts}, 1, <<>>, [{R, 1}]]), P},   % timestamp not a map
                {R, maps:remove(R, Ts), P},                           % origin entry missing
                {R, Ts#{R => 0}, P},                                  % origin entry 0
                {R, Ts#{R => Bad}, P},                                % origin counter not positive int
                {R, Ts#{Other => Bad}, P},                            % another counter bad
                {R, Ts}, {R, Ts, P, P}, {}, {R}, [R, Ts, P], tuple_to_list(M), list_to_tuple(tuple_to_list(M) ++ [x])])).

prop_is_message() ->
    ?SAFE_FORALL({Good, Bad, Any}, {valid_message(), malformed(), any()},
            conj([{accepts, hm_causal_buffer:is_message(Good)},
                  {rejects, not hm_causal_buffer:is_message(Bad)},
                  {total, is_boolean(hm_causal_buffer:is_message(Any))}])).

%%% ================================================================ EUnit entry points

-define(P(Name, Prop), {timeout, 600, {Name, ?_assert(check(Prop))}}).

vv_test_() ->
    [?P("hm_vv: join commutative, associative, idempotent", prop_vv_join()),
     ?P("hm_vv: leq(A, B) iff join(A, B) =:= B", prop_vv_leq()),
     ?P("hm_vv: meet is the greatest lower bound", prop_vv_meet()),
     ?P("hm_vv: compare/2 agrees with leq", prop_vv_compare()),
     ?P("hm_vv: from_list/to_list round trip", prop_vv_list()),
     ?P("hm_vv: no zero entry ever stored", prop_vv_no_zero())].

node_clock_test_() ->
    [?P("hm_node_clock: same set semantics as a set of dots", prop_nc_model()),
     ?P("hm_node_clock: long runs and wide counters", prop_nc_wide()),
     ?P("hm_node_clock: join = union, missing = difference, leq = subset",
        prop_nc_join_missing_leq()),
     ?P("hm_node_clock: canonical form", prop_nc_canonical()),
     ?P("hm_node_clock: join is a lattice join", prop_nc_lattice()),
     ?P("hm_node_clock: from_vv", prop_nc_from_vv()),
     ?P("hm_node_clock: encode/decode, truncated, bad magic", prop_nc_binary()),
     ?P("hm_node_clock: decode of random binaries", prop_nc_decode_garbage()),
     ?P("hm_node_clock: decode accepts exactly canonical entries", prop_nc_decode_entries()),
     ?P("hm_node_clock: DottedDB strip_vv then fill covers the context", prop_nc_strip())].

dcc_test_() ->
    [?P("hm_dcc: join laws and dot semantics (dot map of dot sets)", prop_dcc_join(awset)),
     ?P("hm_dcc: join laws and dot semantics (dot fun)", prop_dcc_join(mv)),
     ?P("hm_dcc: join_delta = join for mutator deltas", prop_dcc_join_delta()),
     ?P("hm_dcc: strip/fill (dot map)", prop_dcc_strip_fill(awset)),
     ?P("hm_dcc: strip/fill (dot fun)", prop_dcc_strip_fill(mv))].

causal_buffer_test_() ->
    [?P("hm_causal_buffer: exactly once, causal order, final state", prop_buffer(false)),
     ?P("hm_causal_buffer: same with advance/2 catch-ups", prop_buffer(true)),
     ?P("hm_causal_buffer: invariants under arbitrary messages", prop_buffer_invariants()),
     ?P("hm_causal_buffer: is_message/1", prop_is_message()),
     ?P("hm_causal_buffer: rcv_ready/2 is rcv_msg/2 where it answers", prop_rcv_ready())].
