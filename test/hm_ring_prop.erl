%% @doc PropEr properties of consistent-hash placement ({@link hm_ring}): preference lists of
%% distinct pool nodes that depend only on the pool as a set, and minimal movement when a
%% node joins or leaves. Run through EUnit.
-module(hm_ring_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_preference_list/0, prop_pool_order/0, prop_join_moves_little/0,
         prop_leave_is_reverse/0, prop_fragment/0, prop_foreign_key_colocated/0]).

check(Prop) -> hm_crdt_prop:check(Prop).

all_nodes() -> [list_to_atom("n" ++ integer_to_list(I) ++ "@h") || I <- lists:seq(1, 12)].

pool() -> ?LET(Ns, non_empty(list(elements(all_nodes()))), lists:usort(Ns)).

%% A pool and a node outside it.
pool_and_new() ->
    ?LET(Ns, non_empty(list(elements(tl(all_nodes())))),
         ?LET(New, elements(all_nodes() -- Ns), {lists:usort(Ns), New})).

shape() -> {range(1, 64), range(1, 5)}.         % {F, N}

prop_preference_list() ->
    ?SAFE_FORALL({Pool, {F, N}}, {pool(), shape()},
                 lists:all(fun(K) ->
                                   L = hm_ring:preference_list(hm_ring:new(Pool), {K, F}, N),
                                   length(L) =:= min(N, length(Pool))
                                       andalso lists:usort(L) =:= lists:sort(L)
                                       andalso L -- Pool =:= []
                           end, lists:seq(1, F))).

prop_pool_order() ->
    ?SAFE_FORALL({Pool, {F, N}}, {pool(), shape()},
                 hm_ring:placement(hm_ring:new(Pool), F, N)
                     =:= hm_ring:placement(hm_ring:new(lists:reverse(Pool) ++ Pool), F, N)).

%% A joining node enters some lists; each such list keeps the others' order and drops at
%% most its last node; every other list is unchanged.
prop_join_moves_little() ->
    ?SAFE_FORALL({{Pool, New}, {F, N}}, {pool_and_new(), shape()},
                 begin
                     Old = hm_ring:placement(hm_ring:new(Pool), F, N),
                     Now = hm_ring:placement(hm_ring:new([New | Pool]), F, N),
                     lists:all(fun(K) -> joined(New, maps:get(K, Old), maps:get(K, Now), N)
                               end, lists:seq(1, F))
                 end).

joined(New, Old, Now, N) ->
    case lists:member(New, Now) of
        false -> Now =:= Old;
        true ->
            Rest = Now -- [New],
            lists:prefix(Rest, Old) andalso length(Old) - length(Rest) =< 1
                andalso length(Now) =:= min(N, length(Old) + 1)
    end.

prop_leave_is_reverse() ->
    ?SAFE_FORALL({Pool, {F, N}}, {pool(), shape()},
                 ?IMPLIES(length(Pool) > 1,
                          begin
                              [Gone | Rest] = Pool,
                              Before = hm_ring:placement(hm_ring:new(Pool), F, N),
                              After = hm_ring:placement(hm_ring:new(Rest), F, N),
                              Moves = hm_ring:moves(Before, After),
                              %% only lists that held the leaving node change
                              lists:all(fun({K, Add, Remove}) ->
                                                Remove =:= [Gone]
                                                    andalso length(Add) =< 1
                                                    andalso lists:member(Gone,
                                                                         maps:get(K, Before))
                                        end, Moves)
                          end)).

prop_fragment() ->
    ?SAFE_FORALL({Key, F}, {any(), range(1, 100)},
                 begin
                     K = hm_ec_frag:fragment(Key, F),
                     K >= 1 andalso K =< F andalso K =:= hm_ec_frag:fragment(Key, F)
                 end).

%% A table with a foreign key on a parent partitioned over the same pool and fragments keeps
%% every record in the fragment of the parent's record its attribute names, and that
%% fragment is held by the first nodes of the parent's: the smaller set of copies is within
%% the larger one, on any pool.
prop_foreign_key_colocated() ->
    ?SAFE_FORALL({Pool, {F, NParent}, NChild, FKey, Key},
                 {pool(), shape(), range(1, 5), any(), any()},
                 begin
                     Ring = hm_ring:new(Pool),
                     ParentOpts = #{frag => #{n_fragments => F}},
                     ChildOpts = #{frag => #{n_fragments => F, foreign_key => {parent, 3}}},
                     Parent = hm_ec_frag:fragment_table(parent, FKey, ParentOpts),
                     Child = hm_ec_frag:record_fragment(child, {child, Key, FKey}, ChildOpts),
                     K = hm_ec_frag:fragment(FKey, F),
                     PL = hm_ring:preference_list(Ring, {K, F}, NParent),
                     CL = hm_ring:preference_list(Ring, {K, F}, NChild),
                     Parent =:= hm_ec_frag:fragment_name(parent, K)
                         andalso Child =:= hm_ec_frag:fragment_name(child, K)
                         andalso hm_ec_frag:key_fragments({child, FKey}, Key, ChildOpts)
                                 =:= [Child]
                         andalso lists:member(Child,
                                              hm_ec_frag:key_fragments(child, Key, ChildOpts))
                         andalso lists:prefix(lists:sublist(PL, length(CL)), CL)
                         andalso lists:prefix(lists:sublist(CL, length(PL)), PL)
                 end).

-define(P(Name, Prop), {timeout, 600, {Name, ?_assert(check(Prop))}}).

ring_test_() ->
    [?P("hm_ring: preference lists of N distinct pool nodes", prop_preference_list()),
     ?P("hm_ring: placement depends on the pool as a set", prop_pool_order()),
     ?P("hm_ring: a joining node moves only what it takes", prop_join_moves_little()),
     ?P("hm_ring: a leaving node moves only what it held", prop_leave_is_reverse()),
     ?P("hm_ring: a key's fragment is fixed and in range", prop_fragment()),
     ?P("hm_ring: a foreign key keeps records with their parent's copies",
        prop_foreign_key_colocated())].

%% On 5 nodes, 64 fragments, N = 3: every node holds some copies, none more than twice its
%% share, and a sixth node takes about 1/6 of the copies.
balance_test() ->
    Pool = lists:sublist(all_nodes(), 5),
    P5 = hm_ring:placement(hm_ring:new(Pool), 64, 3),
    Counts = [length([K || {K, Ns} <- maps:to_list(P5), lists:member(Nd, Ns)]) || Nd <- Pool],
    ?assert(lists:all(fun(C) -> C > 0 andalso C =< 2 * 64 * 3 div 5 end, Counts)),
    P6 = hm_ring:placement(hm_ring:new(Pool ++ [lists:nth(6, all_nodes())]), 64, 3),
    Moved = length([A || {_, A, _} <- hm_ring:moves(P5, P6), _ <- A]),
    ?assert(Moved > 0 andalso Moved =< 2 * 64 * 3 div 6).

names_test() ->
    ?assertEqual(t, hm_ec_frag:fragment_name(t, 1)),
    ?assertEqual(t_frag12, hm_ec_frag:fragment_name(t, 12)),
    ?assertEqual([t, t_frag2, t_frag3], hm_ec_frag:fragment_names(t, 3)).

%% The fragments a key may be in: its own, every one for plain `Tab' with a foreign key,
%% the foreign key's for `{Tab, ForeignKey}', and Mnesia's error for that name on a table
%% without a foreign key.
key_fragments_test() ->
    Plain = #{frag => #{n_fragments => 4}},
    FK = #{frag => #{n_fragments => 4, foreign_key => {p, 3}}},
    ?assertEqual([hm_ec_frag:fragment_table(t, k, Plain)], hm_ec_frag:key_fragments(t, k, Plain)),
    ?assertEqual([t, t_frag2, t_frag3, t_frag4], hm_ec_frag:key_fragments(t, k, FK)),
    ?assertEqual([hm_ec_frag:fragment_name(t, hm_ec_frag:fragment(7, 4))],
                 hm_ec_frag:key_fragments({t, 7}, k, FK)),
    ?assertEqual({error, {combine_error, t, frag_properties, {foreign_key, undefined}}},
                 hm_ec_frag:key_fragments({t, 7}, k, Plain)),
    %% a table in one piece: its one fragment, whatever the key
    ?assertEqual([t], hm_ec_frag:key_fragments(t, k, #{})),
    ?assertEqual(hm_ec_frag:fragment_name(t, hm_ec_frag:fragment(x, 4)),
                 hm_ec_frag:record_fragment(t, {t, k, x}, FK)),
    ?assertEqual(hm_ec_frag:fragment_table(t, k, Plain),
                 hm_ec_frag:record_fragment(t, {t, k, x}, Plain)).

%% Mnesia's rules for a foreign key: the parent's fragments, pool and copies by default;
%% the same ones if given; another parent than the table itself, without a foreign key of
%% its own; an attribute of the record.
foreign_props_test() ->
    Pool = ['a@h', 'b@h', 'c@h'],
    Parent = {ok, #{n_fragments => 8, pool => Pool, n_copies => 2, storage => ram_copies}},
    Attrs = [id, name, pkey],
    {ok, FP, 4} = hm_partition:foreign_props(c, {p, pkey}, Attrs, [{foreign_key, {p, pkey}}],
                                             Parent),
    ?assertEqual([{n_fragments, 8}, {node_pool, Pool}, {n_ram_copies, 2}], FP),
    %% given and equal (the pool in another order), own copies, attribute by position
    ?assertMatch({ok, [{n_fragments, 8}, {node_pool, Pool}, {n_disc_copies, 1}], 3},
                 hm_partition:foreign_props(c, {p, 3}, Attrs,
                                            [{n_fragments, 8}, {n_disc_copies, 1},
                                             {node_pool, lists:reverse(Pool)}], Parent)),
    ?assertMatch({ok, [_, _, {n_disc_copies, 2}], 4},
                 hm_partition:foreign_props(c, {p, pkey}, Attrs, [],
                                            {ok, #{n_fragments => 8, pool => Pool,
                                                   n_copies => 2, storage => disc_copies}})),
    ?assertEqual({error, {combine_error, c, {n_fragments, 4}, p, {n_fragments, 8}}},
                 hm_partition:foreign_props(c, {p, pkey}, Attrs, [{n_fragments, 4}], Parent)),
    ?assertEqual({error, {combine_error, c, {node_pool, ['a@h']}, p, {node_pool, Pool}}},
                 hm_partition:foreign_props(c, {p, pkey}, Attrs, [{node_pool, ['a@h']}],
                                            Parent)),
    ?assertEqual({error, {combine_error, c, {c, pkey}}},
                 hm_partition:foreign_props(c, {c, pkey}, Attrs, [], Parent)),
    ?assertEqual({error, {combine_error, c, "Multiple levels of foreign_key dependencies",
                          {p, pkey}, {g, 3}}},
                 hm_partition:foreign_props(c, {p, pkey}, Attrs, [],
                                            {ok, #{foreign_key => {g, 3}}})),
    Bad = fun(FK) -> {error, {bad_ec_option, c, {frag_properties, {foreign_key, FK}}}} end,
    ?assertEqual(Bad({p, nope}), hm_partition:foreign_props(c, {p, nope}, Attrs, [], Parent)),
    ?assertEqual(Bad({p, 5}), hm_partition:foreign_props(c, {p, 5}, Attrs, [], Parent)),
    ?assertEqual(Bad({p, 1}), hm_partition:foreign_props(c, {p, 1}, Attrs, [], Parent)),
    ?assertEqual(Bad({q, pkey}), hm_partition:foreign_props(c, {q, pkey}, Attrs, [], error)),
    ?assertEqual({error, {bad_type, c, {foreign_key, p}}},
                 hm_partition:foreign_props(c, p, Attrs, [], Parent)).
